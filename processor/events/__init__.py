"""What travels: changes decoded from Debezium's JSON and Avro, reconciled events, chunk tags."""
