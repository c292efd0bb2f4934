"""Declarations as release 0.2 deployed them (its README example), for the upgrade tests."""
