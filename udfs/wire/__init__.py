"""Wire formats: the Avro schemas' records and the dead-letter record."""
