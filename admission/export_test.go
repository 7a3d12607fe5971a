package admission

// HoldersDropped reports, for tests, whether g holds no holders set for act.
func HoldersDropped(g *Guard, act string) bool {
	f := (*g.flags.Load())[act]
	return f == nil || f.holders.Load() == nil
}
