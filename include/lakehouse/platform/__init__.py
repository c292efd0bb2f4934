"""The development platform: ``make up`` (embedded) and ``make stack-up`` (the production
topology, natively) start processes; the platform library never imports this package."""
