"""Loading and unloading versions: instances, placement, warm-up and the fleet's desired state."""
