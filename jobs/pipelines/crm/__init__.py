"""CRM: customers and their orders from an operational database's change feed (Debezium)."""
