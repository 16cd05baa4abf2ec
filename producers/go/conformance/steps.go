package conformance

func runSteps(r *Runner, doc obj) {
	r.miss("steps", "not covered yet")
}
