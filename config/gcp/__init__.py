"""Google Cloud facts the gke config is checked against before anything is created: regions and
their zones, general-purpose machine types, and which accelerators each machine family takes."""
