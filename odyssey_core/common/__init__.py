"""Building blocks shared by every part of the library."""
