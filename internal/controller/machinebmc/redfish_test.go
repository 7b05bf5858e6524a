package machinebmc_test

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/testpeer"
)

func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// response is what a test reads of an HTTP response (its body already
// read and closed).
type response struct {
	StatusCode int
	Header     http.Header
}

func rf(t *testing.T, g Gomega, method, url, body string, hdr map[string]string) (response, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	req.SetBasicAuth("admin", "s3cret-bmc")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rsp, err := insecureClient().Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer rsp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(rsp.Body).Decode(&out)
	return response{StatusCode: rsp.StatusCode, Header: rsp.Header}, out
}

// redfishtool resets the Machine and sets its boot override; a Go client
// checks ETag/If-Match (412 when stale), sessions and virtual media.
func TestRedfishDrivesTheMachine(t *testing.T) {
	testpeer.NeedTool(t, "redfishtool", "redfishtool")
	b, m := readyBMC(t, "rf")
	ep := b.Status.RedfishEndpoint
	g := NewWithT(t)
	g.Expect(ep).To(HavePrefix("https://127.0.0.1:"))

	out, err := redfishtool(t, ep, "s3cret-bmc", "Systems", "reset", "GracefulShutdown")
	g.Expect(err).NotTo(HaveOccurred(), out)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOff))
	})
	g.Eventually(func(g Gomega) {
		g.Expect(machineEvents(g, t, m)).To(ContainSubstring("Redfish ComputerSystem.Reset GracefulShutdown from 127.0.0.1 as admin"))
	}).Should(Succeed())
	out, err = redfishtool(t, ep, "s3cret-bmc", "Systems", "get")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring(`"PowerState": "Off"`))

	out, err = redfishtool(t, ep, "s3cret-bmc", "Systems", "setBootOverride", "Once", "Pxe")
	g.Expect(err).NotTo(HaveOccurred(), out)
	got := waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.BootDevice).To(Equal(machinev1alpha1.BootNetwork))
	})
	g.Expect(got.Spec.BootOnce).To(BeTrue())

	out, err = redfishtool(t, ep, "s3cret-bmc", "-A", "Session", "Systems", "reset", "On")
	g.Expect(err).NotTo(HaveOccurred(), out)
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Status.PowerState).To(Equal(machinev1alpha1.PowerOn))
	})

	// ETag / If-Match.
	sysURL := ep + "/redfish/v1/Systems/" + m.Name
	rsp, sys := rf(t, g, http.MethodGet, sysURL, "", nil)
	g.Expect(rsp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(sys["PowerState"]).To(Equal("On"))
	etag := rsp.Header.Get("ETag")
	g.Expect(etag).NotTo(BeEmpty())
	patch := `{"Boot":{"BootSourceOverrideTarget":"Hdd","BootSourceOverrideEnabled":"Continuous"}}`
	rsp, body := rf(t, g, http.MethodPatch, sysURL, patch, map[string]string{"If-Match": etag})
	g.Expect(rsp.StatusCode).To(Equal(http.StatusOK), "%v", body)
	got = waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.BootDevice).To(Equal(machinev1alpha1.BootDisk))
	})
	g.Expect(got.Spec.BootOnce).To(BeFalse())
	rsp, body = rf(t, g, http.MethodPatch, sysURL, `{"Boot":{"BootSourceOverrideTarget":"Cd"}}`, map[string]string{"If-Match": etag})
	g.Expect(rsp.StatusCode).To(Equal(http.StatusPreconditionFailed), "%v", body)
	g.Expect(body["error"]).To(HaveKeyWithValue("code", "Base.1.8.PreconditionFailed"))

	// Sessions.
	rsp, _ = rf(t, g, http.MethodPost, ep+"/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"s3cret-bmc"}`, nil)
	g.Expect(rsp.StatusCode).To(Equal(http.StatusCreated))
	token := rsp.Header.Get("X-Auth-Token")
	rsp, _ = rf(t, g, http.MethodGet, ep+"/redfish/v1/Managers/BMC", "", map[string]string{"X-Auth-Token": token, "Authorization": ""})
	g.Expect(rsp.StatusCode).To(Equal(http.StatusOK))

	// Virtual media: the image becomes the Machine's spec.image.
	cd := ep + "/redfish/v1/Managers/BMC/VirtualMedia/Cd"
	rsp, body = rf(t, g, http.MethodPost, cd+"/Actions/VirtualMedia.InsertMedia", `{"Image":"http://images.example/busybox.iso","Inserted":true}`, nil)
	g.Expect(rsp.StatusCode).To(Equal(http.StatusNoContent), "%v", body)
	got = waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Spec.Image).To(Equal("busybox"))
	})
	g.Expect(got.Annotations).To(HaveKeyWithValue(bmcv1alpha1.VirtualMediaAnnotation, "http://images.example/busybox.iso"))
	_, media := rf(t, g, http.MethodGet, cd, "", nil)
	g.Expect(media["Inserted"]).To(BeTrue())
	rsp, body = rf(t, g, http.MethodPost, cd+"/Actions/VirtualMedia.InsertMedia", `{"Image":"http://x/Not_An_Image!.iso"}`, nil)
	g.Expect(rsp.StatusCode).To(Equal(http.StatusBadRequest), "%v", body)
	rsp, _ = rf(t, g, http.MethodPost, cd+"/Actions/VirtualMedia.EjectMedia", `{}`, nil)
	g.Expect(rsp.StatusCode).To(Equal(http.StatusNoContent))
	waitMachine(t, m, func(g Gomega, m *machinev1alpha1.Machine) {
		g.Expect(m.Annotations).NotTo(HaveKey(bmcv1alpha1.VirtualMediaAnnotation))
	})

	// A wrong password is refused.
	out, err = redfishtool(t, ep, "wrong", "Systems", "reset", "ForceOff")
	g.Expect(err).To(HaveOccurred(), out)
	cur := &machinev1alpha1.Machine{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), cur)).To(Succeed())
	g.Expect(cur.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn))
}
