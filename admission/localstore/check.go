package localstore

import "github.com/caddy-seckill/caddy-seckill/admission"

// Argument checks of Memory. They mirror redisstore.Store's, which bounds every name that becomes a
// Redis key, field or argument, so that both stores refuse the same input with ErrBadInput.

const (
	memMaxQueueName = 256  // consumer group and consumer names
	memMaxReason    = 1024 // dead-letter reasons
)

func memCheckActivity(id string) error {
	if !admission.ValidActivityID(id) {
		return admission.BadInput("activity id %q", id)
	}
	return nil
}

func memCheckName(what, v string, max int) error {
	if v == "" || len(v) > max {
		return admission.BadInput("%s must be 1-%d bytes", what, max)
	}
	return nil
}

// memCheckQueue checks an activity id, a group and, unless empty is allowed, a consumer name.
func memCheckQueue(activity, group, consumer string) error {
	if err := memCheckActivity(activity); err != nil {
		return err
	}
	if err := memCheckName("group", group, memMaxQueueName); err != nil {
		return err
	}
	return memCheckName("consumer", consumer, memMaxQueueName)
}
