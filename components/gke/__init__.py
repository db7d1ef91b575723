"""gke: a GPU cluster on Google Kubernetes Engine (cluster, GPU node pools, drivers, Filestore)."""
