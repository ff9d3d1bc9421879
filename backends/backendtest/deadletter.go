package backendtest

func deadLetterCases() []testCase { return nil }
