"""Bad input round 20: config and kubeconfig files, static pod manifests and the IP range window file."""
