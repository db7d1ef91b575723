"""Components of the lab stack: kubeadm over SSH on the user's own servers."""
