// Package ocsf holds the OCSF 1.8.0 events Palisade emits for every
// security act — File System Activity (1001), Process Activity (1007),
// Device Config State Change (5019), Detection Finding (2004), Network
// Activity (4001) and HTTP Activity (4002) — the constructors that fill their invariant parts (class,
// category, type_uid, captions, epoch-millisecond time, metadata, the
// sandbox device), a JSONL writer safe for concurrent goroutines and
// processes appending to one file, and URL redaction for HTTP events.
//
// Producers build events with a Source (one per sandbox and component) and
// hand them to an Emitter. Marshal fills the caption siblings of every id
// from tables that a test checks against the OCSF definitions, declares the
// profiles whose attributes the event carries, and refuses an event whose
// invariants do not hold, so a producer cannot emit a malformed record.
// Package ocsftest validates emitted lines against the definitions.
package ocsf

// Version is the OCSF schema version of every event (metadata.version).
const Version = "1.8.0"

// Product identity written to metadata.product.
const (
	ProductName   = "Palisade"
	ProductVendor = "Palisade"
)

// Class UIDs of the classes Palisade emits.
const (
	ClassFileActivity            = 1001
	ClassProcessActivity         = 1007
	ClassDetectionFinding        = 2004
	ClassNetworkActivity         = 4001
	ClassHTTPActivity            = 4002
	ClassDeviceConfigStateChange = 5019
)

// Category UIDs (category_uid) of those classes.
const (
	CategorySystemActivity  = 1
	CategoryFindings        = 2
	CategoryNetworkActivity = 4
	CategoryDiscovery       = 5
)

// OtherID is the id every OCSF enum reserves for "Other": the caption
// sibling then carries a source-specific value instead of "Other".
const OtherID = 99

// Process Activity (1007) activity_id.
const (
	ProcessLaunch    = 1
	ProcessTerminate = 2
)

// Device Config State Change (5019) activity_id. Palisade uses Other with a
// specific activity_name (ActivityPolicyLoad, ...).
const (
	ConfigLog   = 1
	ConfigOther = OtherID
)

// activity_name values Palisade uses with ConfigOther.
const (
	ActivityPolicyLoad         = "Policy Load"
	ActivityPolicyReload       = "Policy Reload"
	ActivityConfinementApplied = "Confinement Applied"
	ActivityAttributionBackend = "Attribution Backend"
	ActivitySendGuard          = "Send Guard"
	ActivityPolicyProposal     = "Policy Proposal"
	ActivityEndpointStatus     = "Endpoint Status"
)

// Detection Finding (2004) activity_id.
const (
	FindingCreate = 1
	FindingUpdate = 2
	FindingClose  = 3
)

// Network Activity (4001) activity_id.
const (
	NetworkOpen   = 1
	NetworkClose  = 2
	NetworkReset  = 3
	NetworkFail   = 4
	NetworkRefuse = 5
)

// HTTP Activity (4002) activity_id, one per request method.
const (
	HTTPConnect = 1
	HTTPDelete  = 2
	HTTPGet     = 3
	HTTPHead    = 4
	HTTPOptions = 5
	HTTPPost    = 6
	HTTPPut     = 7
	HTTPTrace   = 8
	HTTPPatch   = 9
	HTTPOther   = OtherID
)

// severity_id.
const (
	SeverityUnknown       = 0
	SeverityInformational = 1
	SeverityLow           = 2
	SeverityMedium        = 3
	SeverityHigh          = 4
	SeverityCritical      = 5
	SeverityFatal         = 6
)

// status_id of every class except Detection Finding.
const (
	StatusUnknown = 0
	StatusSuccess = 1
	StatusFailure = 2
)

// status_id of Detection Finding (2004).
const (
	FindingStatusNew        = 1
	FindingStatusInProgress = 2
	FindingStatusResolved   = 4
)

// action_id (security_control profile).
const (
	ActionUnknown = 0
	ActionAllowed = 1
	ActionDenied  = 2
)

// disposition_id (security_control profile).
const (
	DispositionUnknown = 0
	DispositionAllowed = 1
	DispositionBlocked = 2
	DispositionError   = 27
)

// state_id of Device Config State Change.
const (
	StateUnknown  = 0
	StateDisabled = 1
	StateEnabled  = 2
)

// security_level_id / prev_security_level_id of Device Config State Change.
const (
	SecurityLevelUnknown     = 0
	SecurityLevelSecure      = 1
	SecurityLevelAtRisk      = 2
	SecurityLevelCompromised = 3
)

// confidence_id of Detection Finding.
const (
	ConfidenceLow    = 1
	ConfidenceMedium = 2
	ConfidenceHigh   = 3
)

// device.type_id and the label Palisade gives it (seed 004: the device is
// the sandbox, type Other labelled "Sandbox").
const (
	DeviceTypeOther = OtherID
	DeviceTypeLabel = "Sandbox"
)

// os.type_id for Linux.
const OSTypeLinux = 200

// file.type_id.
const (
	FileTypeRegular    = 1
	FileTypeFolder     = 2
	FileTypeExecutable = 8
)

// fingerprint.algorithm_id for SHA-256.
const AlgorithmSHA256 = 3

// network_connection_info.direction_id and protocol_ver_id.
const (
	DirectionInbound  = 1
	DirectionOutbound = 2
	ProtocolVerIPv4   = 4
	ProtocolVerIPv6   = 6
)

// user.type_id.
const (
	UserTypeUser   = 1
	UserTypeAdmin  = 2
	UserTypeSystem = 3
)

// Profiles Palisade declares in metadata.profiles when an event carries
// their attributes.
const (
	ProfileHost            = "host"
	ProfileSecurityControl = "security_control"
)
