package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// TestLayerNames checks the layer label values: every layer has one, short snake_case and
// unique, and the help text lists them all in funnel order (the bench reads the order there).
func TestLayerNames(t *testing.T) {
	word := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]bool{}
	var names []string
	for l := layerNone + 1; l < nLayers; l++ {
		n := l.String()
		if !word.MatchString(n) || seen[n] {
			t.Errorf("layer %d: name %q is not unique snake_case", l, n)
		}
		seen[n] = true
		names = append(names, n)
	}
	if h := rejectedHelp(); !strings.Contains(h, "funnel order: "+strings.Join(names, ", ")+".") {
		t.Errorf("help %q does not list the layers in order", h)
	}
}

// TestAdmitErrorLayers checks the layers of the failed admissions no HTTP test can cause on
// demand: a canceled call, the breaker's two refusals as the Guard wraps them, and a split
// activity's contended admission.
func TestAdmitErrorLayers(t *testing.T) {
	q := &request{h: &Handler{logger: zap.NewNop()}}
	for _, tc := range []struct {
		err  error
		want layer
	}{
		{fmt.Errorf("admit: %w", context.Canceled), layerCanceled},
		{fmt.Errorf("admit a: %w: %w", admission.ErrBusy, gobreaker.ErrOpenState), layerBreaker},
		{fmt.Errorf("admit a: %w: %w", admission.ErrBusy, gobreaker.ErrTooManyRequests), layerBreaker},
		{fmt.Errorf("%w: %w", admission.ErrBusy, context.DeadlineExceeded), layerStoreError},
		{fmt.Errorf("%w: %w", admission.ErrBusy, errors.New("connection refused")), layerStoreError},
		{errors.New("something else"), layerStoreError},
		{fmt.Errorf("%w: %w", admission.ErrBusy, &admission.ReplicationError{Op: "admit", Activity: "a", Wanted: 1}), layerReplicasAck},
		{fmt.Errorf("x: %w", admission.ErrBadInput), layerBadRequest},
		{fmt.Errorf("x: %w", admission.ErrUnknownActivity), layerRoute},
		{fmt.Errorf("admit a: bucket 0: %w: 3 items left after 64 pulls", admission.ErrContended), layerContended},
	} {
		if got := q.admitError(tc.err).layer; got != tc.want {
			t.Errorf("admitError(%v) at layer %s, want %s", tc.err, got, tc.want)
		}
		// Result and status reads go through the same breaker and map their 503s alike.
		if tc.want == layerCanceled || tc.want == layerBreaker || tc.want == layerStoreError || tc.want == layerReplicasAck {
			if got := storeFailureLayer(tc.err); got != tc.want {
				t.Errorf("storeFailureLayer(%v) = %s, want %s", tc.err, got, tc.want)
			}
		}
	}
}
