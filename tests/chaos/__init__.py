"""The chaos run: a random fault schedule against the whole pipeline, judged by PostgreSQL."""
