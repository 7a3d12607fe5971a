package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// users are the simulated buyers: user i is "u<i>", buys in activity i mod A, and comes from its
// own address. Everything the invariant checks need about a user is kept here, indexed by user.
type users struct {
	n    int
	acts []string

	auth  []string // "Bearer <jwt>"
	paths []string // the buy path the gateway handed out

	// Outcomes, written by the one worker that runs a user's flow.
	reservation []string // the 202's reservation id
	outcome     []uint8  // outcomeWon, outcomeLost, ...
	confirmed   []bool   // the result call showed the reservation (in the expected state)
	script      []script // what the user's flow sent, for the respond replay

	mu        sync.Mutex
	extraWins map[int][]string // 202s after a user's first win (soak presses): must not happen
}

// script is what one user's flow sent, so the same requests can be replayed against respond.
type script struct {
	path, buy bool
	selling   bool // arrived while stock remained
	polls     uint16
}

// mintUsers creates n users and mints their tokens up front, in parallel, so that minting costs
// nothing during the measurement.
func mintUsers(ctx context.Context, n int, acts []string, secret []byte, ttl time.Duration, progress func(done int)) (*users, error) {
	u := newUsers(n, acts)
	now := time.Now()
	var (
		next  atomic.Int64
		done  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	workers := runtime.GOMAXPROCS(0)
	stop := make(chan struct{})
	if progress != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(int(done.Load()))
				}
			}
		}()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				tok, err := jwtauth.Mint(jwtauth.MintConfig{
					Algorithm: "HS256", Secret: secret, Subject: userID(i), TTL: ttl, Now: now,
				})
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = fmt.Errorf("mint token of %s: %w", userID(i), err)
					}
					errMu.Unlock()
					return
				}
				u.auth[i] = "Bearer " + tok
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mint tokens: %w", err)
	}
	return u, nil
}

// newUsers returns n users without tokens.
func newUsers(n int, acts []string) *users {
	return &users{
		n: n, acts: acts,
		auth:        make([]string, n),
		paths:       make([]string, n),
		reservation: make([]string, n),
		outcome:     make([]uint8, n),
		confirmed:   make([]bool, n),
		script:      make([]script, n),
		extraWins:   map[int][]string{},
	}
}

// userID is the token subject of user i.
func userID(i int) string { return "u" + strconv.Itoa(i) }

// activityOf returns the index of user i's activity.
func (u *users) activityOf(i int) int { return i % len(u.acts) }

// ip returns user i's client address: distinct for the first 2^24 users.
func ip(i int) string {
	i++ // skip 10.0.0.0
	return "10." + strconv.Itoa(i>>16&0xff) + "." + strconv.Itoa(i>>8&0xff) + "." + strconv.Itoa(i&0xff)
}

// addExtraWin notes a 202 a user got after its first win.
func (u *users) addExtraWin(i int, reservation string) {
	u.mu.Lock()
	u.extraWins[i] = append(u.extraWins[i], reservation)
	u.mu.Unlock()
}
