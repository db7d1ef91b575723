"""GPU health service: takes a failing GPU node out of service safely and brings it back
(issue 16). Run as `python -m gpuhealth`; see gpuhealth/service.py for the contract."""
