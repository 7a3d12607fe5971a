package orderbackend

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestMemorySQLite runs every scenario on the embedded single-node shape.
func TestMemorySQLite(t *testing.T) {
	runScenarios(t, newMemorySQLite, allScenarios())
}

// TestRedisPostgres runs every scenario on the production shape: a private redis-server per
// scenario and one private PostgreSQL cluster with a fresh database per scenario.
func TestRedisPostgres(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	runScenarios(t, func(t *testing.T) *env { return newRedisPostgres(t, pg) }, allScenarios())
	// Last: it stops the shared cluster.
	t.Run("PostgresOutage", func(t *testing.T) { testPostgresOutage(t, newRedisPostgres(t, pg)) })
}

// TestRedisPostgresBuckets runs them with every activity split into 4 stock buckets (fewer when
// the stock is smaller): the order path sees a split activity as one.
func TestRedisPostgresBuckets(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	runScenarios(t, func(t *testing.T) *env {
		e := newRedisPostgres(t, pg)
		e.buckets = 4
		return e
	}, allScenarios())
}

func allScenarios() []scenario {
	var all []scenario
	all = append(all, repositoryScenarios...)
	all = append(all, batchScenarios...)
	all = append(all, consumerScenarios...)
	all = append(all, apiScenarios...)
	all = append(all, paymentScenarios...)
	all = append(all, notifyScenarios...)
	return all
}
