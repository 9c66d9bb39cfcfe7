package batonredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
)

// The concurrency-key half of the driver: the admin side of the keys that
// the job scripts enforce (lua/joblib.lua: admit, promote, release). Each
// method is one script on the queue's slot.

// KeySetLimit implements batondriver.KeyDriver.
func (d *Driver) KeySetLimit(ctx context.Context, p *batondriver.KeySetLimitParams) (*batondriver.KeyInfo, error) {
	const op = "set the limit of a key in"
	if err := checkKeyParams(p.Queue, p.Key); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	limit := ""
	if !p.Reset {
		if err := batondriver.CheckKeyLimit(p.Key, p.Limit, 0); err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		limit = itoa(p.Limit)
	}
	qk := d.queueKeys(p.Queue)
	arr, err := d.scripts.keySetLimit.Exec(ctx, d.client, qk.keys, []string{p.Key, limit, qk.noticeChannel()}).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	info, _, err := keyInfo(p.Queue, p.Key, arr)
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return info, nil
}

// KeyGet implements batondriver.KeyDriver.
func (d *Driver) KeyGet(ctx context.Context, p *batondriver.KeyParams) (*batondriver.KeyInfo, error) {
	const op = "get a key of"
	if err := checkKeyParams(p.Queue, p.Key); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	arr, err := d.scripts.keyGet.Exec(ctx, d.client, d.queueKeys(p.Queue).keys, []string{p.Key}).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	info, active, err := keyInfo(p.Queue, p.Key, arr)
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if !active {
		return nil, jobErr(op, p.Queue, fmt.Errorf("%w: %q", batondriver.ErrKeyNotFound, p.Key))
	}
	return info, nil
}

// KeyList implements batondriver.KeyDriver.
func (d *Driver) KeyList(ctx context.Context, p *batondriver.KeyListParams) (*batondriver.KeyListResult, error) {
	const op = "list the keys of"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	limit, err := batondriver.PageSize(p.Limit, p.Offset)
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	arr, err := d.scripts.keyList.Exec(ctx, d.client, d.queueKeys(p.Queue).keys,
		[]string{itoa(p.Offset), itoa(limit)}).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if len(arr) < 1 || (len(arr)-1)%2 != 0 {
		return nil, jobErr(op, p.Queue, fmt.Errorf("unexpected reply of %d elements", len(arr)))
	}
	total, _ := arr[0].AsInt64()
	res := &batondriver.KeyListResult{Total: int(total), Keys: make([]*batondriver.KeyInfo, 0, len(arr)/2)}
	for i := 1; i+1 < len(arr); i += 2 {
		key, err := arr[i].ToString()
		if err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		fields, err := arr[i+1].ToArray()
		if err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		info, _, err := keyInfo(p.Queue, key, fields)
		if err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		res.Keys = append(res.Keys, info)
	}
	return res, nil
}

// keyInfo converts key_info's reply (lua/joblib.lua) and reports whether
// the key is active.
func keyInfo(queue, key string, arr []rueidis.RedisMessage) (*batondriver.KeyInfo, bool, error) {
	const fixed, oldest = 9, 6
	if len(arr) < fixed {
		return nil, false, fmt.Errorf("key %q: unexpected reply of %d elements", key, len(arr))
	}
	n := make([]int64, fixed)
	for i := range n {
		var err error
		if n[i], err = arr[i].AsInt64(); err != nil && !(i == oldest && arr[i].IsNil()) {
			return nil, false, fmt.Errorf("key %q: bad reply element %d: %w", key, i, err)
		}
	}
	info := &batondriver.KeyInfo{
		Queue:    queue,
		Key:      key,
		Limit:    int(n[1]),
		Override: n[2] == 1,
		Holding:  int(n[3]),
		Running:  int(n[4]),
		Parked:   int(n[5]),
		Fence:    n[7],
		Chained:  int(n[8]),
	}
	if n[oldest] != 0 {
		info.OldestParked = time.UnixMilli(n[oldest])
	}
	for _, h := range arr[fixed:] {
		v, err := h.AsStrSlice()
		if err != nil || len(v) != 5 {
			return nil, false, fmt.Errorf("key %q: bad holder in reply", key)
		}
		holder := &batondriver.KeyHolder{ID: v[0], State: batondriver.JobState(v[1]), Next: v[4]}
		if holder.State != batondriver.JobStateRunning {
			info.Holders = append(info.Holders, holder)
			continue
		}
		// A running job has both; "" would be a job hash changed under it.
		fence, err1 := strconv.ParseInt(v[2], 10, 64)
		until, err2 := strconv.ParseInt(v[3], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, false, fmt.Errorf("key %q: holder %s: %w", key, v[0], err)
		}
		holder.Fence, holder.LeaseUntil = fence, time.UnixMilli(until)
		info.Holders = append(info.Holders, holder)
	}
	return info, n[0] == 1, nil
}

// checkKeyParams validates a queue and a concurrency key of it.
func checkKeyParams(queue, key string) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	return batondriver.CheckKey(key)
}
