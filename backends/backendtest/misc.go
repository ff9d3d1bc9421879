package backendtest

func miscCases() []testCase { return nil }
