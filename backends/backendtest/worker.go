package backendtest

func workerCases() []testCase { return nil }
