"""Read-only host readers, one module per kind of resource."""
