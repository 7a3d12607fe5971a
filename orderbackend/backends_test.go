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
// scenario and one private PostgreSQL cluster with a fresh database per scenario, its orders and
// payments in 8 hash partitions by user (partitions 8).
func TestRedisPostgres(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	runScenarios(t, func(t *testing.T) *env { return newRedisPostgresPartitions(t, pg, 8) }, allScenarios())
	// Last: it stops the shared cluster.
	t.Run("PostgresOutage", func(t *testing.T) { testPostgresOutage(t, newRedisPostgres(t, pg)) })
}

// TestRedisPostgresBuckets runs them with every activity split into 4 stock buckets (fewer when
// the stock is smaller): the order path sees a split activity as one. Its databases are not
// partitioned (partitions 1), so that the plain tables run the whole suite too.
func TestRedisPostgresBuckets(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	runScenarios(t, func(t *testing.T) *env {
		e := newRedisPostgresPartitions(t, pg, 1)
		e.buckets = 4
		return e
	}, allScenarios())
}

func allScenarios() []scenario {
	var all []scenario
	all = append(all, repositoryScenarios...)
	all = append(all, batchScenarios...)
	all = append(all, consumerScenarios...)
	all = append(all, deadLetterKillScenarios...)
	all = append(all, apiScenarios...)
	all = append(all, paymentScenarios...)
	all = append(all, notifyScenarios...)
	all = append(all, archiveScenarios...)
	return all
}
