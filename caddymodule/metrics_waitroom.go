package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// roomMetrics are the waiting rooms' metrics: the joins counted by this node, and the lines read
// from the store at each scrape (one Tally per activity with a room).
type roomMetrics struct {
	joins *prometheus.CounterVec // by activity and result: joined, again, or the refusal's code
}

// Descriptions of the gauges read at each scrape.
var (
	roomLengthDesc = prometheus.NewDesc("caddy_seckill_waiting_room_length",
		"Buyers who joined the activity's waiting room line, on every gateway.", []string{"activity"}, nil)
	roomAdmittedDesc = prometheus.NewDesc("caddy_seckill_waiting_room_admitted",
		"Buyers whose turn has come so far; its rate is the admissions per second.", []string{"activity"}, nil)
	roomEndedDesc = prometheus.NewDesc("caddy_seckill_waiting_room_sessions_ended",
		"Admitted buyers whose session is over (bought or not).", []string{"activity"}, nil)
)

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 2 * time.Second

// registerRoomMetrics registers the waiting rooms' metrics of app a on reg.
func registerRoomMetrics(reg prometheus.Registerer, a *App) (*roomMetrics, error) {
	m := &roomMetrics{joins: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caddy_seckill_waiting_room_joins_total",
		Help: "Joins of a waiting room's line on this node, by result: joined, again (kept the first place) or the refusal's code.",
	}, []string{"activity", "result"})}
	if err := reg.Register(m.joins); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if !errors.As(err, &dup) {
			return nil, fmt.Errorf("register waiting room metrics: %w", err)
		}
		m.joins = dup.ExistingCollector.(*prometheus.CounterVec)
	}
	if len(a.rooms) == 0 {
		return m, nil
	}
	if err := reg.Register(roomCollector{a}); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if !errors.As(err, &dup) {
			return nil, fmt.Errorf("register waiting room metrics: %w", err)
		}
	}
	return m, nil
}

// join counts a refused join by the refusal's code.
func (m *roomMetrics) join(activity, code string) {
	m.joins.WithLabelValues(activity, code).Inc()
}

// joined counts a join that took a place (or kept the first one).
func (m *roomMetrics) joined(activity string, first bool) {
	result := "again"
	if first {
		result = "joined"
	}
	m.joins.WithLabelValues(activity, result).Inc()
}

// roomCollector reads the lines of the app's waiting rooms at each scrape.
type roomCollector struct{ a *App }

// Describe implements prometheus.Collector.
func (roomCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- roomLengthDesc
	ch <- roomAdmittedDesc
	ch <- roomEndedDesc
}

// Collect implements prometheus.Collector. A line the store cannot read is left out of the
// scrape rather than shown as 0.
func (c roomCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for id, room := range c.a.rooms {
		act, ok := c.a.acts.lookup(id)
		if !ok {
			continue
		}
		session := room.Config().Session
		t, err := c.a.line.Tally(ctx, id, 0, session)
		if err != nil {
			continue
		}
		interval, lineSession := room.LineTerms(t.IntervalMS, t.SessionMS)
		if lineSession != session {
			// The line keeps another session than this configuration's (its first join's, on a
			// gateway configured otherwise): count the sessions ended by it.
			session = lineSession
			if t, err = c.a.line.Tally(ctx, id, 0, session); err != nil {
				continue
			}
		}
		since := t.Now.Sub(act.Start)
		admitted := waitroom.EarlyServed(t.EarlyCount, since, interval) + t.LateAdmitted[0]
		ended := waitroom.EarlyServed(t.EarlyCount, since-session, interval) + t.LateAdmitted[1]
		ch <- prometheus.MustNewConstMetric(roomLengthDesc, prometheus.GaugeValue, float64(t.Length), id)
		ch <- prometheus.MustNewConstMetric(roomAdmittedDesc, prometheus.GaugeValue, float64(admitted), id)
		ch <- prometheus.MustNewConstMetric(roomEndedDesc, prometheus.GaugeValue, float64(ended), id)
	}
}
