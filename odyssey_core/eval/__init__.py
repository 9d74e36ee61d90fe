"""Playing and looking at episodes: episode runner and annotated videos."""
