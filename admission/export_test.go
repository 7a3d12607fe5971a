package admission

// HeldDropped reports, for tests, whether g holds no held set for act.
func HeldDropped(g *Guard, act string) bool {
	f := (*g.flags.Load())[act]
	return f == nil || f.held.Load() == nil
}
