raise ImportError("keras is not installed (a lean install, as the test pretends)")
