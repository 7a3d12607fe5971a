// Package clusterslot answers two questions about a Redis Cluster that the client and the test
// servers both ask: which hash slot a key is in, and which node a node names as a slot's master.
package clusterslot

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Of is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash tag, modulo 16384.
func Of(key string) int64 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int64(crc) % 16384
}

// Node is a Cluster node as another node names it: its id (stable for the node's life, whatever
// address a client reaches it by) and the address it announces.
type Node struct {
	ID   string
	Addr string
}

// Master asks node (any node of a Cluster) for slot's online master, as its CLUSTER SHARDS shows it.
func Master(ctx context.Context, node *redis.Client, slot int64) (Node, error) {
	shards, err := node.ClusterShards(ctx).Result()
	if err != nil {
		return Node{}, err
	}
	for _, sh := range shards {
		for _, sr := range sh.Slots {
			if sr.Start > slot || slot > sr.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return Node{ID: n.ID, Addr: net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))}, nil
				}
			}
		}
	}
	return Node{}, fmt.Errorf("slot %d has no online master", slot)
}

// ID asks node for its own id (CLUSTER MYID).
func ID(ctx context.Context, node *redis.Client) (string, error) {
	return node.Do(ctx, "CLUSTER", "MYID").Text()
}
