# coordinator integration tests: `sparrow coordinator` as a process.
spw_integration(coord_cli 60)
