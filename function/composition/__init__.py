"""One Federation composed: desired resources from the XR, status from observed state."""
