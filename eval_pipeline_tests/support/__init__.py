"""What tests share that is not a test: fixtures' plugins, builders, forgeries, real-data fixtures."""
