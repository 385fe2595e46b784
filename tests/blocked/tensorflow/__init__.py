raise ImportError("tensorflow is not installed (a lean install, as the test pretends)")
