"""The data-plane runtime: the loop, the partitions one instance owns, the commit protocol."""
