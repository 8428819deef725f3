"""Who may use the processor's web port: the guard in front of every route, and the
console's sessions."""
