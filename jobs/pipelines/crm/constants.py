"""What the CRM declaration, transforms and generator share: one place for each value."""

from lakehouse.spec import debezium_schema

# The rows of the operational database's tables, as Debezium's `before`/`after` carry them.
CUSTOMER = "customer_id BIGINT NOT NULL, name STRING, email STRING, segment STRING, country STRING"
ORDER = "order_id BIGINT NOT NULL, customer_id BIGINT, amount DOUBLE, status STRING, ordered_at TIMESTAMP"
CUSTOMER_CHANGES = debezium_schema(CUSTOMER)
ORDER_CHANGES = debezium_schema(ORDER)
# Debezium's topics are <server>.<schema>.<table>
CUSTOMER_TOPIC = "crm.public.customers"
ORDER_TOPIC = "crm.public.orders"
# Postgres: the position of the change in the write-ahead log orders a key's changes.
SEQUENCE = "source.lsn"
SEGMENTS = ("consumer", "smb", "enterprise", "public_sector")
COUNTRIES = ("DE", "FR", "NL", "PL", "ES", "IT")
ORDER_STATUSES = ("placed", "paid", "shipped", "delivered")
