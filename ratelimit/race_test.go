//go:build race

package ratelimit

// raceEnabled skips the million-key test under the race detector, which makes it ten times slower
// without finding anything the small concurrent tests do not.
const raceEnabled = true
