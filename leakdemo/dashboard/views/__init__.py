"""One module per protocol view of the Attack Lab, over the shared pictures (..pictures)."""
