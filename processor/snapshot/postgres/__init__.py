"""The PostgreSQL connector: read-only chunks, watermark rows, values as Debezium encodes them."""
