package ocsf

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"time"
)

// Source is who emits: one sandbox and one component. Its methods build
// events whose invariant parts (class, category, type_uid, time in epoch
// milliseconds, metadata, the sandbox device) are already right. A Source
// is read-only after set-up and safe for concurrent use.
type Source struct {
	// Sandbox is the sandbox name: metadata.uid, device.name,
	// device.hostname and process.sandbox.
	Sandbox string
	// Component is the emitting binary ("sandbox-supervisor",
	// "egress-proxy"): metadata.source.
	Component string
	// ProductVersion is the Palisade build version (metadata.product.version).
	ProductVersion string
	// Hostname is device.hostname; empty means the sandbox name (the
	// sandbox's UTS hostname).
	Hostname string
	// KernelRelease is device.os.kernel_release; NewSource reads it.
	KernelRelease string
	// Labels are copied to metadata.labels (e.g. "kind:task", "agent:ID").
	Labels []string
	// Now returns the current time; nil means time.Now. Tests pin it.
	Now func() time.Time
}

// NewSource returns a Source for sandbox and component with the running
// kernel's release filled in.
func NewSource(sandbox, component, productVersion string) *Source {
	return &Source{
		Sandbox:        sandbox,
		Component:      component,
		ProductVersion: productVersion,
		KernelRelease:  kernelRelease(),
	}
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// NowMillis returns the Source's current time in epoch milliseconds.
func (s *Source) NowMillis() int64 {
	if s.Now != nil {
		return s.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// Device returns the OCSF device describing the sandbox: type_id Other
// labelled "Sandbox", named after the sandbox, with the OS (Linux) as a
// separate object.
func (s *Source) Device() *Device {
	host := s.Hostname
	if host == "" {
		host = s.Sandbox
	}
	return &Device{
		TypeID:   DeviceTypeOther,
		Type:     DeviceTypeLabel,
		Name:     s.Sandbox,
		Hostname: host,
		OS:       &OS{Name: "Linux", TypeID: OSTypeLinux, KernelRelease: s.KernelRelease},
	}
}

// Base returns the shared part of an event of class uid and activity id,
// stamped now. Constructors use it; producers need it only for events no
// constructor covers.
func (s *Source) Base(classUID, activityID, severityID int) Base {
	return Base{
		ActivityID: activityID,
		ClassUID:   classUID,
		Time:       s.NowMillis(),
		SeverityID: severityID,
		Metadata: Metadata{
			Version: Version,
			UID:     s.Sandbox,
			Product: Product{Name: ProductName, VendorName: ProductVendor, Version: s.ProductVersion},
			Source:  s.Component,
			Labels:  append([]string(nil), s.Labels...),
		},
		Device: s.Device(),
	}
}

// newUID returns a random identifier prefixed with the sandbox name, for
// finding_info.uid.
func (s *Source) newUID(kind string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return s.Sandbox + ":" + kind + ":" + hex.EncodeToString(b[:])
}

func boolPtr(b bool) *bool { return &b }
