package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc/ipmi"
	"github.com/converge-dev/converge/internal/bmc/redfish"
)

// Event reasons on Machines.
const (
	// EventPower: a power command was accepted.
	EventPower = "BMCPower"
	// EventBoot: a boot device change was accepted.
	EventBoot = "BMCBootDevice"
	// EventVirtualMedia: virtual media was inserted or ejected.
	EventVirtualMedia = "BMCVirtualMedia"
)

// cycleTimeout bounds how long a power cycle waits for the Machine to
// report Off before it asks for On again.
const cycleTimeout = 5 * time.Minute

// machineBackend is one BMC's view of its Machine.
type machineBackend struct {
	srv   *Server
	key   types.NamespacedName
	bmc   types.NamespacedName
	creds *atomic.Pointer[creds]
	// ctx ends when the BMC stops (power cycles in flight end with it).
	ctx context.Context
}

func (b *machineBackend) credentials() (string, string, bool) {
	c := b.creds.Load()
	if c == nil || c.user == "" {
		return "", "", false
	}
	return c.user, c.password, true
}

func (b *machineBackend) machine(ctx context.Context) (*machinev1alpha1.Machine, error) {
	m := &machinev1alpha1.Machine{}
	if err := b.srv.Client.Get(ctx, b.key, m); err != nil {
		return nil, err
	}
	return m, nil
}

// patch merges spec (and metadata) into the Machine; rv, when set, makes
// it conditional on that resourceVersion.
func (b *machineBackend) patch(ctx context.Context, body map[string]any, rv string) error {
	if rv != "" {
		md, _ := body["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			body["metadata"] = md
		}
		md["resourceVersion"] = rv
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = b.patchMachine(ctx, raw)
	return err
}

// patchMachine sends a merge patch and returns the Machine as written.
func (b *machineBackend) patchMachine(ctx context.Context, raw []byte) (*machinev1alpha1.Machine, error) {
	m := &machinev1alpha1.Machine{}
	m.Namespace, m.Name = b.key.Namespace, b.key.Name
	return m, b.srv.Client.Patch(ctx, m, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager))
}

func (b *machineBackend) event(reason, action, note string) {
	m := &machinev1alpha1.Machine{}
	m.Namespace, m.Name = b.key.Namespace, b.key.Name
	// The cached copy gives the UID the Event refers to.
	if err := b.srv.Client.Get(b.ctx, b.key, m); err != nil {
		return
	}
	b.srv.Recorder.Eventf(m, nil, corev1.EventTypeNormal, reason, action, "%s", note)
}

func (b *machineBackend) setPower(ctx context.Context, p machinev1alpha1.PowerState) error {
	return b.patch(ctx, map[string]any{"spec": map[string]any{"powerState": p}}, "")
}

// cycle powers off, waits until the Machine reports Off, then powers on;
// it returns once Off is asked for. A Machine already off is powered on.
func (b *machineBackend) cycle(ctx context.Context) error {
	m, err := b.machine(ctx)
	if err != nil {
		return err
	}
	if m.Status.PowerState != machinev1alpha1.PowerOn && m.EffectivePowerState() == machinev1alpha1.PowerOff {
		return b.setPower(ctx, machinev1alpha1.PowerOn)
	}
	off, err := b.patchMachine(ctx, []byte(`{"spec":{"powerState":"Off"}}`))
	if err != nil {
		return err
	}
	// The cache may still hold the Machine as it was before this write:
	// only a copy at or past it tells whether someone asked for another
	// state since (a stale copy read as "someone asked for On" left the
	// Machine off for good).
	written, _ := strconv.ParseInt(off.ResourceVersion, 10, 64)
	go func() {
		ctx, cancel := context.WithTimeout(b.ctx, cycleTimeout)
		defer cancel()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				b.srv.Log.Info("Power cycle gave up waiting for the Machine to power off", "Machine", b.key.String())
				return
			case <-t.C:
			}
			m, err := b.machine(ctx)
			if err != nil {
				continue
			}
			if rv, err := strconv.ParseInt(m.ResourceVersion, 10, 64); err == nil && rv < written {
				continue // the cache has not shown the Off write yet
			}
			if m.EffectivePowerState() != machinev1alpha1.PowerOff {
				return // someone else asked for another state meanwhile
			}
			if m.Status.PowerState == machinev1alpha1.PowerOff {
				if err := b.setPower(ctx, machinev1alpha1.PowerOn); err != nil {
					// Tried again at the next tick, until cycleTimeout.
					b.srv.Log.Error(err, "Powering on after a power cycle", "Machine", b.key.String())
					continue
				}
				return
			}
		}
	}()
	return nil
}

func (b *machineBackend) setBoot(ctx context.Context, d machinev1alpha1.BootDevice, once bool, rv string) error {
	return b.patch(ctx, map[string]any{"spec": map[string]any{"bootDevice": d, "bootOnce": once}}, rv)
}

// ipmiBackend adapts machineBackend to ipmi.Backend.
type ipmiBackend struct{ *machineBackend }

func (b ipmiBackend) Credentials() (string, string, bool) { return b.credentials() }

func (b ipmiBackend) PoweredOn(ctx context.Context) (bool, error) {
	m, err := b.machine(ctx)
	if err != nil {
		return false, err
	}
	return m.Status.PowerState == machinev1alpha1.PowerOn, nil
}

func (b ipmiBackend) Chassis(ctx context.Context, a ipmi.ChassisAction, c ipmi.Caller) error {
	var err error
	switch a {
	case ipmi.PowerUp:
		err = b.setPower(ctx, machinev1alpha1.PowerOn)
	case ipmi.PowerDown, ipmi.SoftShutdown:
		err = b.setPower(ctx, machinev1alpha1.PowerOff)
	case ipmi.PowerCycle, ipmi.HardReset:
		err = b.cycle(ctx)
	default:
		return fmt.Errorf("chassis action %d not supported", a)
	}
	if err != nil {
		return err
	}
	b.event(EventPower, "IPMIChassisControl", fmt.Sprintf("IPMI chassis %s from %s as %s", a, c.Addr, c.User))
	return nil
}

func (b ipmiBackend) SetBoot(ctx context.Context, d ipmi.BootDevice, persistent bool, c ipmi.Caller) error {
	dev, once := machinev1alpha1.BootDisk, !persistent
	switch d {
	case ipmi.BootNone:
		once = false
	case ipmi.BootPXE:
		dev = machinev1alpha1.BootNetwork
	case ipmi.BootCDROM:
		dev = machinev1alpha1.BootCDROM
	}
	if err := b.setBoot(ctx, dev, once, ""); err != nil {
		return err
	}
	how := "persistent"
	if once {
		how = "next boot only"
	}
	b.event(EventBoot, "IPMISetBootOptions", fmt.Sprintf("IPMI chassis bootdev %s (%s) from %s as %s", d, how, c.Addr, c.User))
	return nil
}

func (b ipmiBackend) Boot(ctx context.Context) (ipmi.BootDevice, bool, error) {
	m, err := b.machine(ctx)
	if err != nil {
		return "", false, err
	}
	d := ipmi.BootDisk
	switch m.EffectiveBootDevice() {
	case machinev1alpha1.BootNetwork:
		d = ipmi.BootPXE
	case machinev1alpha1.BootCDROM:
		d = ipmi.BootCDROM
	}
	return d, !m.Spec.BootOnce, nil
}

// redfishBackend adapts machineBackend to redfish.Backend.
type redfishBackend struct{ *machineBackend }

func (b redfishBackend) Credentials() (string, string, bool) { return b.credentials() }

// System maps the Machine: the power state from its status (PoweringOn or
// PoweringOff while the spec asks for the other), the boot override from
// its spec (Disk for every boot is Hdd/Continuous), the ETag from its
// resourceVersion.
func (b redfishBackend) System(ctx context.Context) (redfish.System, error) {
	m, err := b.machine(ctx)
	if err != nil {
		return redfish.System{}, err
	}
	s := redfish.System{ID: m.Name, ETag: `W/"` + m.ResourceVersion + `"`, MediaImage: m.Annotations[bmcv1alpha1.VirtualMediaAnnotation]}
	observed, want := m.Status.PowerState, m.EffectivePowerState()
	switch {
	case observed == machinev1alpha1.PowerOn && want == machinev1alpha1.PowerOff:
		s.PowerState = "PoweringOff"
	case observed != machinev1alpha1.PowerOn && want == machinev1alpha1.PowerOn:
		s.PowerState = "PoweringOn"
		if observed == "" {
			s.PowerState = "Off"
		}
	case observed == machinev1alpha1.PowerOn:
		s.PowerState = "On"
	default:
		s.PowerState = "Off"
	}
	switch m.EffectiveBootDevice() {
	case machinev1alpha1.BootNetwork:
		s.BootTarget = "Pxe"
	case machinev1alpha1.BootCDROM:
		s.BootTarget = "Cd"
	default:
		s.BootTarget = "Hdd"
	}
	s.BootEnabled = "Continuous"
	if m.Spec.BootOnce {
		s.BootEnabled = "Once"
	}
	return s, nil
}

func (b redfishBackend) Reset(ctx context.Context, resetType string, c redfish.Caller) error {
	var err error
	switch resetType {
	case "On":
		err = b.setPower(ctx, machinev1alpha1.PowerOn)
	case "ForceOff", "GracefulShutdown":
		err = b.setPower(ctx, machinev1alpha1.PowerOff)
	case "ForceRestart", "GracefulRestart", "PowerCycle":
		err = b.cycle(ctx)
	default:
		return &redfish.InvalidValueError{Property: "ResetType", Value: resetType, Why: "not supported"}
	}
	if err != nil {
		return err
	}
	b.event(EventPower, "RedfishReset", fmt.Sprintf("Redfish ComputerSystem.Reset %s from %s as %s", resetType, c.Addr, c.User))
	return nil
}

func (b redfishBackend) SetBoot(ctx context.Context, target, enabled, ifMatch string, c redfish.Caller) error {
	dev, once := machinev1alpha1.BootDisk, enabled == "Once"
	switch target {
	case "Pxe":
		dev = machinev1alpha1.BootNetwork
	case "Cd":
		dev = machinev1alpha1.BootCDROM
	case "None":
		once = false
	}
	if enabled == "Disabled" {
		dev, once = machinev1alpha1.BootDisk, false
	}
	rv := ""
	if ifMatch != "" {
		rv = strings.Trim(strings.TrimPrefix(ifMatch, "W/"), `"`)
	}
	if err := b.setBoot(ctx, dev, once, rv); err != nil {
		if apierrors.IsConflict(err) {
			return redfish.ErrPreconditionFailed
		}
		return err
	}
	b.event(EventBoot, "RedfishBootOverride", fmt.Sprintf("Redfish boot override %s %s from %s as %s", target, enabled, c.Addr, c.User))
	return nil
}

var imageName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ImageName is the Machine image an InsertMedia Image names: the name
// itself, or the last path segment of a URL without its .iso or .img
// extension.
func ImageName(image string) (string, error) {
	name := image
	if u, err := url.Parse(image); err == nil && u.Scheme != "" {
		name = path.Base(u.Path)
	}
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".iso"), ".img")
	if len(name) > 63 || !imageName.MatchString(name) {
		return "", &redfish.InvalidValueError{Property: "Image", Value: image,
			Why: "the image must name a Machine image: lowercase letters, digits, '.', '_' and '-', at most 63 (the last path segment of a URL, without .iso or .img)"}
	}
	return name, nil
}

func (b redfishBackend) InsertMedia(ctx context.Context, image string, c redfish.Caller) error {
	name, err := ImageName(image)
	if err != nil {
		return err
	}
	if len(image) > 1024 {
		return &redfish.InvalidValueError{Property: "Image", Value: image[:64] + "...", Why: "longer than 1024 bytes"}
	}
	if err := b.patch(ctx, map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{bmcv1alpha1.VirtualMediaAnnotation: image}},
		"spec":     map[string]any{"image": name},
	}, ""); err != nil {
		return err
	}
	b.event(EventVirtualMedia, "RedfishInsertMedia", fmt.Sprintf("Redfish virtual media %s inserted (image %s) from %s as %s", image, name, c.Addr, c.User))
	return nil
}

func (b redfishBackend) EjectMedia(ctx context.Context, c redfish.Caller) error {
	if err := b.patch(ctx, map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{bmcv1alpha1.VirtualMediaAnnotation: nil}},
	}, ""); err != nil {
		return err
	}
	b.event(EventVirtualMedia, "RedfishEjectMedia", fmt.Sprintf("Redfish virtual media ejected from %s as %s", c.Addr, c.User))
	return nil
}
