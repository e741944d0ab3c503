//go:build !linux

package proxy

import (
	"context"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Watch needs inotify; off Linux reloads come from SIGHUP or POST /reload.
func (p *Proxy) Watch(ctx context.Context) error { return feature.ErrNotSupported }
