"""Developer tools used by the tests: the HTTP load test and the input fuzzer."""
