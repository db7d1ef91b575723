"""The Compute Engine regions this program accepts, with the letters of their zones.

A mistyped zone (`us-central1-z`) or region would otherwise fail only when GKE is called, after
other resources were created. Zone letters are not always a-c: us-central1 has a, b, c, f;
us-east1 and europe-west1 have b, c, d. A region missing here is refused until it is added (one
line); whether a zone offers a given accelerator is left to GKE (`gcloud compute
accelerator-types list`).

Imports nothing of the project, so the config model can use it.
"""

from __future__ import annotations

ZONE_LETTERS: dict[str, str] = {
    # Americas
    "us-central1": "abcf",
    "us-east1": "bcd",
    "us-east4": "abc",
    "us-east5": "abc",
    "us-south1": "abc",
    "us-west1": "abc",
    "us-west2": "abc",
    "us-west3": "abc",
    "us-west4": "abc",
    "northamerica-northeast1": "abc",
    "northamerica-northeast2": "abc",
    "southamerica-east1": "abc",
    "southamerica-west1": "abc",
    # Europe, Middle East, Africa
    "europe-central2": "abc",
    "europe-north1": "abc",
    "europe-southwest1": "abc",
    "europe-west1": "bcd",
    "europe-west2": "abc",
    "europe-west3": "abc",
    "europe-west4": "abc",
    "europe-west6": "abc",
    "europe-west8": "abc",
    "europe-west9": "abc",
    "europe-west10": "abc",
    "europe-west12": "abc",
    "me-central1": "abc",
    "me-central2": "abc",
    "me-west1": "abc",
    "africa-south1": "abc",
    # Asia Pacific
    "asia-east1": "abc",
    "asia-east2": "abc",
    "asia-northeast1": "abc",
    "asia-northeast2": "abc",
    "asia-northeast3": "abc",
    "asia-south1": "abc",
    "asia-south2": "abc",
    "asia-southeast1": "abc",
    "asia-southeast2": "abc",
    "australia-southeast1": "abc",
    "australia-southeast2": "abc",
}

REGIONS = tuple(ZONE_LETTERS)


def zones_of(region: str) -> tuple[str, ...]:
    return tuple(f"{region}-{letter}" for letter in ZONE_LETTERS.get(region, ""))


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def check_zone(zone: str) -> str | None:
    """What is wrong with `zone`, or None when it is a zone of a known region."""
    region = region_of(zone)
    if region not in ZONE_LETTERS:
        return (f"{zone!r} is not a Compute Engine zone of a known region (e.g. us-central1-a); "
                f"regions: {', '.join(REGIONS)}")
    if zone not in zones_of(region):
        return f"{zone!r} is not a Compute Engine zone; {region} has {', '.join(zones_of(region))}"
    return None


def check_region(region: str) -> str | None:
    if region not in ZONE_LETTERS:
        return f"{region!r} is not a known Compute Engine region; known: {', '.join(REGIONS)}"
    return None
