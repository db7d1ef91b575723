"""Components of the dev stack: an existing cluster (minikube --gpus all, kind, a team cluster)."""
