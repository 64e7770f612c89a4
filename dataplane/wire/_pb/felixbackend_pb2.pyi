from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IPVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANY: _ClassVar[IPVersion]
    IPV4: _ClassVar[IPVersion]
    IPV6: _ClassVar[IPVersion]

class LiveMigrationRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NO_ROLE: _ClassVar[LiveMigrationRole]
    SOURCE: _ClassVar[LiveMigrationRole]
    TARGET: _ClassVar[LiveMigrationRole]

class RouteType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CIDR_INFO: _ClassVar[RouteType]
    REMOTE_WORKLOAD: _ClassVar[RouteType]
    REMOTE_HOST: _ClassVar[RouteType]
    LOCAL_WORKLOAD: _ClassVar[RouteType]
    LOCAL_HOST: _ClassVar[RouteType]
    REMOTE_TUNNEL: _ClassVar[RouteType]
    LOCAL_TUNNEL: _ClassVar[RouteType]

class IPPoolType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[IPPoolType]
    NO_ENCAP: _ClassVar[IPPoolType]
    VXLAN: _ClassVar[IPPoolType]
    IPIP: _ClassVar[IPPoolType]

class RoutePriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NORMAL: _ClassVar[RoutePriority]
    ELEVATED: _ClassVar[RoutePriority]

class BackendState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_ACTIVE: _ClassVar[BackendState]
    BACKEND_TERMINATING: _ClassVar[BackendState]
    BACKEND_QUARANTINED: _ClassVar[BackendState]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALLOWED: _ClassVar[Action]
    DENIED: _ClassVar[Action]
ANY: IPVersion
IPV4: IPVersion
IPV6: IPVersion
NO_ROLE: LiveMigrationRole
SOURCE: LiveMigrationRole
TARGET: LiveMigrationRole
CIDR_INFO: RouteType
REMOTE_WORKLOAD: RouteType
REMOTE_HOST: RouteType
LOCAL_WORKLOAD: RouteType
LOCAL_HOST: RouteType
REMOTE_TUNNEL: RouteType
LOCAL_TUNNEL: RouteType
NONE: IPPoolType
NO_ENCAP: IPPoolType
VXLAN: IPPoolType
IPIP: IPPoolType
NORMAL: RoutePriority
ELEVATED: RoutePriority
BACKEND_ACTIVE: BackendState
BACKEND_TERMINATING: BackendState
BACKEND_QUARANTINED: BackendState
ALLOWED: Action
DENIED: Action

class SyncRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToDataplane(_message.Message):
    __slots__ = ("sequence_number", "in_sync", "ipset_update", "ipset_delta_update", "ipset_remove", "active_profile_update", "active_profile_remove", "active_policy_update", "active_policy_remove", "host_endpoint_update", "host_endpoint_remove", "workload_endpoint_update", "workload_endpoint_remove", "config_update", "host_metadata_update", "host_metadata_remove", "host_metadata_v6_update", "host_metadata_v6_remove", "host_metadata_v4v6_update", "host_metadata_v4v6_remove", "ipam_pool_update", "ipam_pool_remove", "service_account_update", "service_account_remove", "namespace_update", "namespace_remove", "route_update", "route_remove", "vtep_update", "vtep_remove", "wireguard_endpoint_update", "wireguard_endpoint_remove", "wireguard_endpoint_v6_update", "wireguard_endpoint_v6_remove", "global_bgp_config_update", "encapsulation", "service_update", "service_remove", "service_backends_update")
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    IPSET_UPDATE_FIELD_NUMBER: _ClassVar[int]
    IPSET_DELTA_UPDATE_FIELD_NUMBER: _ClassVar[int]
    IPSET_REMOVE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PROFILE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PROFILE_REMOVE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_POLICY_UPDATE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_POLICY_REMOVE_FIELD_NUMBER: _ClassVar[int]
    HOST_ENDPOINT_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_ENDPOINT_REMOVE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ENDPOINT_UPDATE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ENDPOINT_REMOVE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_METADATA_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_METADATA_REMOVE_FIELD_NUMBER: _ClassVar[int]
    HOST_METADATA_V6_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_METADATA_V6_REMOVE_FIELD_NUMBER: _ClassVar[int]
    HOST_METADATA_V4V6_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_METADATA_V4V6_REMOVE_FIELD_NUMBER: _ClassVar[int]
    IPAM_POOL_UPDATE_FIELD_NUMBER: _ClassVar[int]
    IPAM_POOL_REMOVE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ACCOUNT_UPDATE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ACCOUNT_REMOVE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_REMOVE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_REMOVE_FIELD_NUMBER: _ClassVar[int]
    VTEP_UPDATE_FIELD_NUMBER: _ClassVar[int]
    VTEP_REMOVE_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_ENDPOINT_UPDATE_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_ENDPOINT_REMOVE_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_ENDPOINT_V6_UPDATE_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_ENDPOINT_V6_REMOVE_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BGP_CONFIG_UPDATE_FIELD_NUMBER: _ClassVar[int]
    ENCAPSULATION_FIELD_NUMBER: _ClassVar[int]
    SERVICE_UPDATE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_REMOVE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_BACKENDS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    sequence_number: int
    in_sync: InSync
    ipset_update: IPSetUpdate
    ipset_delta_update: IPSetDeltaUpdate
    ipset_remove: IPSetRemove
    active_profile_update: ActiveProfileUpdate
    active_profile_remove: ActiveProfileRemove
    active_policy_update: ActivePolicyUpdate
    active_policy_remove: ActivePolicyRemove
    host_endpoint_update: HostEndpointUpdate
    host_endpoint_remove: HostEndpointRemove
    workload_endpoint_update: WorkloadEndpointUpdate
    workload_endpoint_remove: WorkloadEndpointRemove
    config_update: ConfigUpdate
    host_metadata_update: HostMetadataUpdate
    host_metadata_remove: HostMetadataRemove
    host_metadata_v6_update: HostMetadataV6Update
    host_metadata_v6_remove: HostMetadataV6Remove
    host_metadata_v4v6_update: HostMetadataV4V6Update
    host_metadata_v4v6_remove: HostMetadataV4V6Remove
    ipam_pool_update: IPAMPoolUpdate
    ipam_pool_remove: IPAMPoolRemove
    service_account_update: ServiceAccountUpdate
    service_account_remove: ServiceAccountRemove
    namespace_update: NamespaceUpdate
    namespace_remove: NamespaceRemove
    route_update: RouteUpdate
    route_remove: RouteRemove
    vtep_update: VXLANTunnelEndpointUpdate
    vtep_remove: VXLANTunnelEndpointRemove
    wireguard_endpoint_update: WireguardEndpointUpdate
    wireguard_endpoint_remove: WireguardEndpointRemove
    wireguard_endpoint_v6_update: WireguardEndpointV6Update
    wireguard_endpoint_v6_remove: WireguardEndpointV6Remove
    global_bgp_config_update: GlobalBGPConfigUpdate
    encapsulation: Encapsulation
    service_update: ServiceUpdate
    service_remove: ServiceRemove
    service_backends_update: ServiceBackendsUpdate
    def __init__(self, sequence_number: _Optional[int] = ..., in_sync: _Optional[_Union[InSync, _Mapping]] = ..., ipset_update: _Optional[_Union[IPSetUpdate, _Mapping]] = ..., ipset_delta_update: _Optional[_Union[IPSetDeltaUpdate, _Mapping]] = ..., ipset_remove: _Optional[_Union[IPSetRemove, _Mapping]] = ..., active_profile_update: _Optional[_Union[ActiveProfileUpdate, _Mapping]] = ..., active_profile_remove: _Optional[_Union[ActiveProfileRemove, _Mapping]] = ..., active_policy_update: _Optional[_Union[ActivePolicyUpdate, _Mapping]] = ..., active_policy_remove: _Optional[_Union[ActivePolicyRemove, _Mapping]] = ..., host_endpoint_update: _Optional[_Union[HostEndpointUpdate, _Mapping]] = ..., host_endpoint_remove: _Optional[_Union[HostEndpointRemove, _Mapping]] = ..., workload_endpoint_update: _Optional[_Union[WorkloadEndpointUpdate, _Mapping]] = ..., workload_endpoint_remove: _Optional[_Union[WorkloadEndpointRemove, _Mapping]] = ..., config_update: _Optional[_Union[ConfigUpdate, _Mapping]] = ..., host_metadata_update: _Optional[_Union[HostMetadataUpdate, _Mapping]] = ..., host_metadata_remove: _Optional[_Union[HostMetadataRemove, _Mapping]] = ..., host_metadata_v6_update: _Optional[_Union[HostMetadataV6Update, _Mapping]] = ..., host_metadata_v6_remove: _Optional[_Union[HostMetadataV6Remove, _Mapping]] = ..., host_metadata_v4v6_update: _Optional[_Union[HostMetadataV4V6Update, _Mapping]] = ..., host_metadata_v4v6_remove: _Optional[_Union[HostMetadataV4V6Remove, _Mapping]] = ..., ipam_pool_update: _Optional[_Union[IPAMPoolUpdate, _Mapping]] = ..., ipam_pool_remove: _Optional[_Union[IPAMPoolRemove, _Mapping]] = ..., service_account_update: _Optional[_Union[ServiceAccountUpdate, _Mapping]] = ..., service_account_remove: _Optional[_Union[ServiceAccountRemove, _Mapping]] = ..., namespace_update: _Optional[_Union[NamespaceUpdate, _Mapping]] = ..., namespace_remove: _Optional[_Union[NamespaceRemove, _Mapping]] = ..., route_update: _Optional[_Union[RouteUpdate, _Mapping]] = ..., route_remove: _Optional[_Union[RouteRemove, _Mapping]] = ..., vtep_update: _Optional[_Union[VXLANTunnelEndpointUpdate, _Mapping]] = ..., vtep_remove: _Optional[_Union[VXLANTunnelEndpointRemove, _Mapping]] = ..., wireguard_endpoint_update: _Optional[_Union[WireguardEndpointUpdate, _Mapping]] = ..., wireguard_endpoint_remove: _Optional[_Union[WireguardEndpointRemove, _Mapping]] = ..., wireguard_endpoint_v6_update: _Optional[_Union[WireguardEndpointV6Update, _Mapping]] = ..., wireguard_endpoint_v6_remove: _Optional[_Union[WireguardEndpointV6Remove, _Mapping]] = ..., global_bgp_config_update: _Optional[_Union[GlobalBGPConfigUpdate, _Mapping]] = ..., encapsulation: _Optional[_Union[Encapsulation, _Mapping]] = ..., service_update: _Optional[_Union[ServiceUpdate, _Mapping]] = ..., service_remove: _Optional[_Union[ServiceRemove, _Mapping]] = ..., service_backends_update: _Optional[_Union[ServiceBackendsUpdate, _Mapping]] = ...) -> None: ...

class FromDataplane(_message.Message):
    __slots__ = ("sequence_number", "process_status_update", "host_endpoint_status_update", "host_endpoint_status_remove", "workload_endpoint_status_update", "workload_endpoint_status_remove", "wireguard_status_update", "dataplane_in_sync")
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PROCESS_STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_ENDPOINT_STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HOST_ENDPOINT_STATUS_REMOVE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ENDPOINT_STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ENDPOINT_STATUS_REMOVE_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    DATAPLANE_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    sequence_number: int
    process_status_update: ProcessStatusUpdate
    host_endpoint_status_update: HostEndpointStatusUpdate
    host_endpoint_status_remove: HostEndpointStatusRemove
    workload_endpoint_status_update: WorkloadEndpointStatusUpdate
    workload_endpoint_status_remove: WorkloadEndpointStatusRemove
    wireguard_status_update: WireguardStatusUpdate
    dataplane_in_sync: DataplaneInSync
    def __init__(self, sequence_number: _Optional[int] = ..., process_status_update: _Optional[_Union[ProcessStatusUpdate, _Mapping]] = ..., host_endpoint_status_update: _Optional[_Union[HostEndpointStatusUpdate, _Mapping]] = ..., host_endpoint_status_remove: _Optional[_Union[HostEndpointStatusRemove, _Mapping]] = ..., workload_endpoint_status_update: _Optional[_Union[WorkloadEndpointStatusUpdate, _Mapping]] = ..., workload_endpoint_status_remove: _Optional[_Union[WorkloadEndpointStatusRemove, _Mapping]] = ..., wireguard_status_update: _Optional[_Union[WireguardStatusUpdate, _Mapping]] = ..., dataplane_in_sync: _Optional[_Union[DataplaneInSync, _Mapping]] = ...) -> None: ...

class ConfigUpdate(_message.Message):
    __slots__ = ("config", "source_to_raw_config", "message")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SourceToRawConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: RawConfig
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[RawConfig, _Mapping]] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TO_RAW_CONFIG_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    config: _containers.ScalarMap[str, str]
    source_to_raw_config: _containers.MessageMap[int, RawConfig]
    message: str
    def __init__(self, config: _Optional[_Mapping[str, str]] = ..., source_to_raw_config: _Optional[_Mapping[int, RawConfig]] = ..., message: _Optional[str] = ...) -> None: ...

class RawConfig(_message.Message):
    __slots__ = ("source", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    source: str
    config: _containers.ScalarMap[str, str]
    def __init__(self, source: _Optional[str] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class InSync(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DataplaneInSync(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IPSetUpdate(_message.Message):
    __slots__ = ("id", "members", "type")
    class IPSetType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        IP: _ClassVar[IPSetUpdate.IPSetType]
        IP_AND_PORT: _ClassVar[IPSetUpdate.IPSetType]
        NET: _ClassVar[IPSetUpdate.IPSetType]
    IP: IPSetUpdate.IPSetType
    IP_AND_PORT: IPSetUpdate.IPSetType
    NET: IPSetUpdate.IPSetType
    ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    members: _containers.RepeatedScalarFieldContainer[str]
    type: IPSetUpdate.IPSetType
    def __init__(self, id: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., type: _Optional[_Union[IPSetUpdate.IPSetType, str]] = ...) -> None: ...

class IPSetDeltaUpdate(_message.Message):
    __slots__ = ("id", "added_members", "removed_members")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    id: str
    added_members: _containers.RepeatedScalarFieldContainer[str]
    removed_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., added_members: _Optional[_Iterable[str]] = ..., removed_members: _Optional[_Iterable[str]] = ...) -> None: ...

class IPSetRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ProfileID(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ("inbound_rules", "outbound_rules")
    INBOUND_RULES_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_RULES_FIELD_NUMBER: _ClassVar[int]
    inbound_rules: _containers.RepeatedCompositeFieldContainer[Rule]
    outbound_rules: _containers.RepeatedCompositeFieldContainer[Rule]
    def __init__(self, inbound_rules: _Optional[_Iterable[_Union[Rule, _Mapping]]] = ..., outbound_rules: _Optional[_Iterable[_Union[Rule, _Mapping]]] = ...) -> None: ...

class ActiveProfileUpdate(_message.Message):
    __slots__ = ("id", "profile")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    id: ProfileID
    profile: Profile
    def __init__(self, id: _Optional[_Union[ProfileID, _Mapping]] = ..., profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...

class ActiveProfileRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: ProfileID
    def __init__(self, id: _Optional[_Union[ProfileID, _Mapping]] = ...) -> None: ...

class PolicyID(_message.Message):
    __slots__ = ("name", "namespace", "kind")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    kind: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("inbound_rules", "outbound_rules", "untracked", "pre_dnat", "namespace", "original_selector", "perf_hints", "tier")
    INBOUND_RULES_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_RULES_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_FIELD_NUMBER: _ClassVar[int]
    PRE_DNAT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PERF_HINTS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    inbound_rules: _containers.RepeatedCompositeFieldContainer[Rule]
    outbound_rules: _containers.RepeatedCompositeFieldContainer[Rule]
    untracked: bool
    pre_dnat: bool
    namespace: str
    original_selector: str
    perf_hints: _containers.RepeatedScalarFieldContainer[str]
    tier: str
    def __init__(self, inbound_rules: _Optional[_Iterable[_Union[Rule, _Mapping]]] = ..., outbound_rules: _Optional[_Iterable[_Union[Rule, _Mapping]]] = ..., untracked: _Optional[bool] = ..., pre_dnat: _Optional[bool] = ..., namespace: _Optional[str] = ..., original_selector: _Optional[str] = ..., perf_hints: _Optional[_Iterable[str]] = ..., tier: _Optional[str] = ...) -> None: ...

class ActivePolicyUpdate(_message.Message):
    __slots__ = ("id", "policy")
    ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    id: PolicyID
    policy: Policy
    def __init__(self, id: _Optional[_Union[PolicyID, _Mapping]] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class ActivePolicyRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: PolicyID
    def __init__(self, id: _Optional[_Union[PolicyID, _Mapping]] = ...) -> None: ...

class Protocol(_message.Message):
    __slots__ = ("number", "name")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    number: int
    name: str
    def __init__(self, number: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class PortRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class IcmpTypeAndCode(_message.Message):
    __slots__ = ("type", "code")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    type: int
    code: int
    def __init__(self, type: _Optional[int] = ..., code: _Optional[int] = ...) -> None: ...

class ServiceAccountMatch(_message.Message):
    __slots__ = ("selector", "names")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    selector: str
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, selector: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class HTTPMatch(_message.Message):
    __slots__ = ("methods", "paths")
    class PathMatch(_message.Message):
        __slots__ = ("exact", "prefix")
        EXACT_FIELD_NUMBER: _ClassVar[int]
        PREFIX_FIELD_NUMBER: _ClassVar[int]
        exact: str
        prefix: str
        def __init__(self, exact: _Optional[str] = ..., prefix: _Optional[str] = ...) -> None: ...
    METHODS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    methods: _containers.RepeatedScalarFieldContainer[str]
    paths: _containers.RepeatedCompositeFieldContainer[HTTPMatch.PathMatch]
    def __init__(self, methods: _Optional[_Iterable[str]] = ..., paths: _Optional[_Iterable[_Union[HTTPMatch.PathMatch, _Mapping]]] = ...) -> None: ...

class RuleMetadata(_message.Message):
    __slots__ = ("annotations",)
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    def __init__(self, annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Rule(_message.Message):
    __slots__ = ("action", "ip_version", "protocol", "src_net", "src_ports", "dst_net", "dst_ports", "icmp_type", "icmp_type_code", "src_ip_set_ids", "dst_ip_set_ids", "src_named_port_ip_set_ids", "dst_named_port_ip_set_ids", "dst_ip_port_set_ids", "not_protocol", "not_src_net", "not_src_ports", "not_dst_net", "not_dst_ports", "not_icmp_type", "not_icmp_type_code", "not_src_ip_set_ids", "not_dst_ip_set_ids", "not_src_named_port_ip_set_ids", "not_dst_named_port_ip_set_ids", "original_src_selector", "original_dst_selector", "original_src_namespace_selector", "original_dst_namespace_selector", "original_not_src_selector", "original_not_dst_selector", "src_service_account_match", "dst_service_account_match", "http_match", "metadata", "original_dst_service", "original_dst_service_namespace", "original_src_service", "original_src_service_namespace", "rule_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    IP_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SRC_NET_FIELD_NUMBER: _ClassVar[int]
    SRC_PORTS_FIELD_NUMBER: _ClassVar[int]
    DST_NET_FIELD_NUMBER: _ClassVar[int]
    DST_PORTS_FIELD_NUMBER: _ClassVar[int]
    ICMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    ICMP_TYPE_CODE_FIELD_NUMBER: _ClassVar[int]
    SRC_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    DST_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    SRC_NAMED_PORT_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    DST_NAMED_PORT_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    DST_IP_PORT_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    NOT_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NOT_SRC_NET_FIELD_NUMBER: _ClassVar[int]
    NOT_SRC_PORTS_FIELD_NUMBER: _ClassVar[int]
    NOT_DST_NET_FIELD_NUMBER: _ClassVar[int]
    NOT_DST_PORTS_FIELD_NUMBER: _ClassVar[int]
    NOT_ICMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    NOT_ICMP_TYPE_CODE_FIELD_NUMBER: _ClassVar[int]
    NOT_SRC_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    NOT_DST_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    NOT_SRC_NAMED_PORT_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    NOT_DST_NAMED_PORT_IP_SET_IDS_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SRC_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_DST_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SRC_NAMESPACE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_DST_NAMESPACE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_NOT_SRC_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_NOT_DST_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SRC_SERVICE_ACCOUNT_MATCH_FIELD_NUMBER: _ClassVar[int]
    DST_SERVICE_ACCOUNT_MATCH_FIELD_NUMBER: _ClassVar[int]
    HTTP_MATCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_DST_SERVICE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_DST_SERVICE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SRC_SERVICE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SRC_SERVICE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    action: str
    ip_version: IPVersion
    protocol: Protocol
    src_net: _containers.RepeatedScalarFieldContainer[str]
    src_ports: _containers.RepeatedCompositeFieldContainer[PortRange]
    dst_net: _containers.RepeatedScalarFieldContainer[str]
    dst_ports: _containers.RepeatedCompositeFieldContainer[PortRange]
    icmp_type: int
    icmp_type_code: IcmpTypeAndCode
    src_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    dst_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    src_named_port_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    dst_named_port_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    dst_ip_port_set_ids: _containers.RepeatedScalarFieldContainer[str]
    not_protocol: Protocol
    not_src_net: _containers.RepeatedScalarFieldContainer[str]
    not_src_ports: _containers.RepeatedCompositeFieldContainer[PortRange]
    not_dst_net: _containers.RepeatedScalarFieldContainer[str]
    not_dst_ports: _containers.RepeatedCompositeFieldContainer[PortRange]
    not_icmp_type: int
    not_icmp_type_code: IcmpTypeAndCode
    not_src_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    not_dst_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    not_src_named_port_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    not_dst_named_port_ip_set_ids: _containers.RepeatedScalarFieldContainer[str]
    original_src_selector: str
    original_dst_selector: str
    original_src_namespace_selector: str
    original_dst_namespace_selector: str
    original_not_src_selector: str
    original_not_dst_selector: str
    src_service_account_match: ServiceAccountMatch
    dst_service_account_match: ServiceAccountMatch
    http_match: HTTPMatch
    metadata: RuleMetadata
    original_dst_service: str
    original_dst_service_namespace: str
    original_src_service: str
    original_src_service_namespace: str
    rule_id: str
    def __init__(self, action: _Optional[str] = ..., ip_version: _Optional[_Union[IPVersion, str]] = ..., protocol: _Optional[_Union[Protocol, _Mapping]] = ..., src_net: _Optional[_Iterable[str]] = ..., src_ports: _Optional[_Iterable[_Union[PortRange, _Mapping]]] = ..., dst_net: _Optional[_Iterable[str]] = ..., dst_ports: _Optional[_Iterable[_Union[PortRange, _Mapping]]] = ..., icmp_type: _Optional[int] = ..., icmp_type_code: _Optional[_Union[IcmpTypeAndCode, _Mapping]] = ..., src_ip_set_ids: _Optional[_Iterable[str]] = ..., dst_ip_set_ids: _Optional[_Iterable[str]] = ..., src_named_port_ip_set_ids: _Optional[_Iterable[str]] = ..., dst_named_port_ip_set_ids: _Optional[_Iterable[str]] = ..., dst_ip_port_set_ids: _Optional[_Iterable[str]] = ..., not_protocol: _Optional[_Union[Protocol, _Mapping]] = ..., not_src_net: _Optional[_Iterable[str]] = ..., not_src_ports: _Optional[_Iterable[_Union[PortRange, _Mapping]]] = ..., not_dst_net: _Optional[_Iterable[str]] = ..., not_dst_ports: _Optional[_Iterable[_Union[PortRange, _Mapping]]] = ..., not_icmp_type: _Optional[int] = ..., not_icmp_type_code: _Optional[_Union[IcmpTypeAndCode, _Mapping]] = ..., not_src_ip_set_ids: _Optional[_Iterable[str]] = ..., not_dst_ip_set_ids: _Optional[_Iterable[str]] = ..., not_src_named_port_ip_set_ids: _Optional[_Iterable[str]] = ..., not_dst_named_port_ip_set_ids: _Optional[_Iterable[str]] = ..., original_src_selector: _Optional[str] = ..., original_dst_selector: _Optional[str] = ..., original_src_namespace_selector: _Optional[str] = ..., original_dst_namespace_selector: _Optional[str] = ..., original_not_src_selector: _Optional[str] = ..., original_not_dst_selector: _Optional[str] = ..., src_service_account_match: _Optional[_Union[ServiceAccountMatch, _Mapping]] = ..., dst_service_account_match: _Optional[_Union[ServiceAccountMatch, _Mapping]] = ..., http_match: _Optional[_Union[HTTPMatch, _Mapping]] = ..., metadata: _Optional[_Union[RuleMetadata, _Mapping]] = ..., original_dst_service: _Optional[str] = ..., original_dst_service_namespace: _Optional[str] = ..., original_src_service: _Optional[str] = ..., original_src_service_namespace: _Optional[str] = ..., rule_id: _Optional[str] = ...) -> None: ...

class TierInfo(_message.Message):
    __slots__ = ("name", "ingress_policies", "egress_policies", "default_action")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INGRESS_POLICIES_FIELD_NUMBER: _ClassVar[int]
    EGRESS_POLICIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ACTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    ingress_policies: _containers.RepeatedCompositeFieldContainer[PolicyID]
    egress_policies: _containers.RepeatedCompositeFieldContainer[PolicyID]
    default_action: str
    def __init__(self, name: _Optional[str] = ..., ingress_policies: _Optional[_Iterable[_Union[PolicyID, _Mapping]]] = ..., egress_policies: _Optional[_Iterable[_Union[PolicyID, _Mapping]]] = ..., default_action: _Optional[str] = ...) -> None: ...

class NatInfo(_message.Message):
    __slots__ = ("ext_ip", "int_ip")
    EXT_IP_FIELD_NUMBER: _ClassVar[int]
    INT_IP_FIELD_NUMBER: _ClassVar[int]
    ext_ip: str
    int_ip: str
    def __init__(self, ext_ip: _Optional[str] = ..., int_ip: _Optional[str] = ...) -> None: ...

class WorkloadEndpointID(_message.Message):
    __slots__ = ("orchestrator_id", "workload_id", "endpoint_id")
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    orchestrator_id: str
    workload_id: str
    endpoint_id: str
    def __init__(self, orchestrator_id: _Optional[str] = ..., workload_id: _Optional[str] = ..., endpoint_id: _Optional[str] = ...) -> None: ...

class WorkloadBpfSkipRedir(_message.Message):
    __slots__ = ("Egress", "Ingress")
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    INGRESS_FIELD_NUMBER: _ClassVar[int]
    Egress: bool
    Ingress: bool
    def __init__(self, Egress: _Optional[bool] = ..., Ingress: _Optional[bool] = ...) -> None: ...

class QoSControls(_message.Message):
    __slots__ = ("IngressBandwidth", "EgressBandwidth", "IngressBurst", "EgressBurst", "IngressPacketRate", "EgressPacketRate", "IngressMaxConnections", "EgressMaxConnections", "IngressPeakrate", "EgressPeakrate", "IngressMinburst", "EgressMinburst", "IngressPacketBurst", "EgressPacketBurst")
    INGRESSBANDWIDTH_FIELD_NUMBER: _ClassVar[int]
    EGRESSBANDWIDTH_FIELD_NUMBER: _ClassVar[int]
    INGRESSBURST_FIELD_NUMBER: _ClassVar[int]
    EGRESSBURST_FIELD_NUMBER: _ClassVar[int]
    INGRESSPACKETRATE_FIELD_NUMBER: _ClassVar[int]
    EGRESSPACKETRATE_FIELD_NUMBER: _ClassVar[int]
    INGRESSMAXCONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    EGRESSMAXCONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    INGRESSPEAKRATE_FIELD_NUMBER: _ClassVar[int]
    EGRESSPEAKRATE_FIELD_NUMBER: _ClassVar[int]
    INGRESSMINBURST_FIELD_NUMBER: _ClassVar[int]
    EGRESSMINBURST_FIELD_NUMBER: _ClassVar[int]
    INGRESSPACKETBURST_FIELD_NUMBER: _ClassVar[int]
    EGRESSPACKETBURST_FIELD_NUMBER: _ClassVar[int]
    IngressBandwidth: int
    EgressBandwidth: int
    IngressBurst: int
    EgressBurst: int
    IngressPacketRate: int
    EgressPacketRate: int
    IngressMaxConnections: int
    EgressMaxConnections: int
    IngressPeakrate: int
    EgressPeakrate: int
    IngressMinburst: int
    EgressMinburst: int
    IngressPacketBurst: int
    EgressPacketBurst: int
    def __init__(self, IngressBandwidth: _Optional[int] = ..., EgressBandwidth: _Optional[int] = ..., IngressBurst: _Optional[int] = ..., EgressBurst: _Optional[int] = ..., IngressPacketRate: _Optional[int] = ..., EgressPacketRate: _Optional[int] = ..., IngressMaxConnections: _Optional[int] = ..., EgressMaxConnections: _Optional[int] = ..., IngressPeakrate: _Optional[int] = ..., EgressPeakrate: _Optional[int] = ..., IngressMinburst: _Optional[int] = ..., EgressMinburst: _Optional[int] = ..., IngressPacketBurst: _Optional[int] = ..., EgressPacketBurst: _Optional[int] = ...) -> None: ...

class QoSPolicy(_message.Message):
    __slots__ = ("destination", "dscp")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DSCP_FIELD_NUMBER: _ClassVar[int]
    destination: str
    dscp: int
    def __init__(self, destination: _Optional[str] = ..., dscp: _Optional[int] = ...) -> None: ...

class LocalBGPPeer(_message.Message):
    __slots__ = ("bgp_peer_name",)
    BGP_PEER_NAME_FIELD_NUMBER: _ClassVar[int]
    bgp_peer_name: str
    def __init__(self, bgp_peer_name: _Optional[str] = ...) -> None: ...

class WorkloadEndpoint(_message.Message):
    __slots__ = ("state", "name", "mac", "profile_ids", "ipv4_nets", "ipv6_nets", "tiers", "ipv4_nat", "ipv6_nat", "allow_spoofed_source_prefixes", "annotations", "qos_controls", "local_bgp_peer", "skip_redir", "qos_policies", "is_istio_ambient", "live_migration_role", "live_migration_uid", "live_migration_vmi_name")
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    PROFILE_IDS_FIELD_NUMBER: _ClassVar[int]
    IPV4_NETS_FIELD_NUMBER: _ClassVar[int]
    IPV6_NETS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    IPV4_NAT_FIELD_NUMBER: _ClassVar[int]
    IPV6_NAT_FIELD_NUMBER: _ClassVar[int]
    ALLOW_SPOOFED_SOURCE_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    QOS_CONTROLS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BGP_PEER_FIELD_NUMBER: _ClassVar[int]
    SKIP_REDIR_FIELD_NUMBER: _ClassVar[int]
    QOS_POLICIES_FIELD_NUMBER: _ClassVar[int]
    IS_ISTIO_AMBIENT_FIELD_NUMBER: _ClassVar[int]
    LIVE_MIGRATION_ROLE_FIELD_NUMBER: _ClassVar[int]
    LIVE_MIGRATION_UID_FIELD_NUMBER: _ClassVar[int]
    LIVE_MIGRATION_VMI_NAME_FIELD_NUMBER: _ClassVar[int]
    state: str
    name: str
    mac: str
    profile_ids: _containers.RepeatedScalarFieldContainer[str]
    ipv4_nets: _containers.RepeatedScalarFieldContainer[str]
    ipv6_nets: _containers.RepeatedScalarFieldContainer[str]
    tiers: _containers.RepeatedCompositeFieldContainer[TierInfo]
    ipv4_nat: _containers.RepeatedCompositeFieldContainer[NatInfo]
    ipv6_nat: _containers.RepeatedCompositeFieldContainer[NatInfo]
    allow_spoofed_source_prefixes: _containers.RepeatedScalarFieldContainer[str]
    annotations: _containers.ScalarMap[str, str]
    qos_controls: QoSControls
    local_bgp_peer: LocalBGPPeer
    skip_redir: WorkloadBpfSkipRedir
    qos_policies: _containers.RepeatedCompositeFieldContainer[QoSPolicy]
    is_istio_ambient: bool
    live_migration_role: LiveMigrationRole
    live_migration_uid: str
    live_migration_vmi_name: str
    def __init__(self, state: _Optional[str] = ..., name: _Optional[str] = ..., mac: _Optional[str] = ..., profile_ids: _Optional[_Iterable[str]] = ..., ipv4_nets: _Optional[_Iterable[str]] = ..., ipv6_nets: _Optional[_Iterable[str]] = ..., tiers: _Optional[_Iterable[_Union[TierInfo, _Mapping]]] = ..., ipv4_nat: _Optional[_Iterable[_Union[NatInfo, _Mapping]]] = ..., ipv6_nat: _Optional[_Iterable[_Union[NatInfo, _Mapping]]] = ..., allow_spoofed_source_prefixes: _Optional[_Iterable[str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., qos_controls: _Optional[_Union[QoSControls, _Mapping]] = ..., local_bgp_peer: _Optional[_Union[LocalBGPPeer, _Mapping]] = ..., skip_redir: _Optional[_Union[WorkloadBpfSkipRedir, _Mapping]] = ..., qos_policies: _Optional[_Iterable[_Union[QoSPolicy, _Mapping]]] = ..., is_istio_ambient: _Optional[bool] = ..., live_migration_role: _Optional[_Union[LiveMigrationRole, str]] = ..., live_migration_uid: _Optional[str] = ..., live_migration_vmi_name: _Optional[str] = ...) -> None: ...

class WorkloadEndpointUpdate(_message.Message):
    __slots__ = ("id", "endpoint")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    id: WorkloadEndpointID
    endpoint: WorkloadEndpoint
    def __init__(self, id: _Optional[_Union[WorkloadEndpointID, _Mapping]] = ..., endpoint: _Optional[_Union[WorkloadEndpoint, _Mapping]] = ...) -> None: ...

class WorkloadEndpointRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: WorkloadEndpointID
    def __init__(self, id: _Optional[_Union[WorkloadEndpointID, _Mapping]] = ...) -> None: ...

class HostEndpointID(_message.Message):
    __slots__ = ("endpoint_id",)
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    def __init__(self, endpoint_id: _Optional[str] = ...) -> None: ...

class HostEndpoint(_message.Message):
    __slots__ = ("name", "profile_ids", "tiers", "expected_ipv4_addrs", "expected_ipv6_addrs", "untracked_tiers", "pre_dnat_tiers", "forward_tiers", "qos_policies")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_IDS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_IPV4_ADDRS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_IPV6_ADDRS_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_TIERS_FIELD_NUMBER: _ClassVar[int]
    PRE_DNAT_TIERS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_TIERS_FIELD_NUMBER: _ClassVar[int]
    QOS_POLICIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    profile_ids: _containers.RepeatedScalarFieldContainer[str]
    tiers: _containers.RepeatedCompositeFieldContainer[TierInfo]
    expected_ipv4_addrs: _containers.RepeatedScalarFieldContainer[str]
    expected_ipv6_addrs: _containers.RepeatedScalarFieldContainer[str]
    untracked_tiers: _containers.RepeatedCompositeFieldContainer[TierInfo]
    pre_dnat_tiers: _containers.RepeatedCompositeFieldContainer[TierInfo]
    forward_tiers: _containers.RepeatedCompositeFieldContainer[TierInfo]
    qos_policies: _containers.RepeatedCompositeFieldContainer[QoSPolicy]
    def __init__(self, name: _Optional[str] = ..., profile_ids: _Optional[_Iterable[str]] = ..., tiers: _Optional[_Iterable[_Union[TierInfo, _Mapping]]] = ..., expected_ipv4_addrs: _Optional[_Iterable[str]] = ..., expected_ipv6_addrs: _Optional[_Iterable[str]] = ..., untracked_tiers: _Optional[_Iterable[_Union[TierInfo, _Mapping]]] = ..., pre_dnat_tiers: _Optional[_Iterable[_Union[TierInfo, _Mapping]]] = ..., forward_tiers: _Optional[_Iterable[_Union[TierInfo, _Mapping]]] = ..., qos_policies: _Optional[_Iterable[_Union[QoSPolicy, _Mapping]]] = ...) -> None: ...

class HostEndpointUpdate(_message.Message):
    __slots__ = ("id", "endpoint")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    id: HostEndpointID
    endpoint: HostEndpoint
    def __init__(self, id: _Optional[_Union[HostEndpointID, _Mapping]] = ..., endpoint: _Optional[_Union[HostEndpoint, _Mapping]] = ...) -> None: ...

class HostEndpointRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: HostEndpointID
    def __init__(self, id: _Optional[_Union[HostEndpointID, _Mapping]] = ...) -> None: ...

class ProcessStatusUpdate(_message.Message):
    __slots__ = ("iso_timestamp", "uptime")
    ISO_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    iso_timestamp: str
    uptime: float
    def __init__(self, iso_timestamp: _Optional[str] = ..., uptime: _Optional[float] = ...) -> None: ...

class EndpointStatus(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: str
    def __init__(self, status: _Optional[str] = ...) -> None: ...

class HostEndpointStatusUpdate(_message.Message):
    __slots__ = ("id", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: HostEndpointID
    status: EndpointStatus
    def __init__(self, id: _Optional[_Union[HostEndpointID, _Mapping]] = ..., status: _Optional[_Union[EndpointStatus, _Mapping]] = ...) -> None: ...

class HostEndpointStatusRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: HostEndpointID
    def __init__(self, id: _Optional[_Union[HostEndpointID, _Mapping]] = ...) -> None: ...

class WorkloadEndpointStatusUpdate(_message.Message):
    __slots__ = ("id", "status", "endpoint")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    id: WorkloadEndpointID
    status: EndpointStatus
    endpoint: WorkloadEndpoint
    def __init__(self, id: _Optional[_Union[WorkloadEndpointID, _Mapping]] = ..., status: _Optional[_Union[EndpointStatus, _Mapping]] = ..., endpoint: _Optional[_Union[WorkloadEndpoint, _Mapping]] = ...) -> None: ...

class WorkloadEndpointStatusRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: WorkloadEndpointID
    def __init__(self, id: _Optional[_Union[WorkloadEndpointID, _Mapping]] = ...) -> None: ...

class WireguardStatusUpdate(_message.Message):
    __slots__ = ("public_key", "ip_version")
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    IP_VERSION_FIELD_NUMBER: _ClassVar[int]
    public_key: str
    ip_version: IPVersion
    def __init__(self, public_key: _Optional[str] = ..., ip_version: _Optional[_Union[IPVersion, str]] = ...) -> None: ...

class HostMetadataUpdate(_message.Message):
    __slots__ = ("hostname", "ipv4_addr", "ipv6_addr", "asnumber", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IPV4_ADDR_FIELD_NUMBER: _ClassVar[int]
    IPV6_ADDR_FIELD_NUMBER: _ClassVar[int]
    ASNUMBER_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ipv4_addr: str
    ipv6_addr: str
    asnumber: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, hostname: _Optional[str] = ..., ipv4_addr: _Optional[str] = ..., ipv6_addr: _Optional[str] = ..., asnumber: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HostMetadataRemove(_message.Message):
    __slots__ = ("hostname", "ipv4_addr")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IPV4_ADDR_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ipv4_addr: str
    def __init__(self, hostname: _Optional[str] = ..., ipv4_addr: _Optional[str] = ...) -> None: ...

class HostMetadataV6Update(_message.Message):
    __slots__ = ("hostname", "ipv6_addr")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IPV6_ADDR_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ipv6_addr: str
    def __init__(self, hostname: _Optional[str] = ..., ipv6_addr: _Optional[str] = ...) -> None: ...

class HostMetadataV6Remove(_message.Message):
    __slots__ = ("hostname", "ipv6_addr")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IPV6_ADDR_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ipv6_addr: str
    def __init__(self, hostname: _Optional[str] = ..., ipv6_addr: _Optional[str] = ...) -> None: ...

class HostMetadataV4V6Update(_message.Message):
    __slots__ = ("hostname", "ipv4_addr", "ipv6_addr", "asnumber", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IPV4_ADDR_FIELD_NUMBER: _ClassVar[int]
    IPV6_ADDR_FIELD_NUMBER: _ClassVar[int]
    ASNUMBER_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ipv4_addr: str
    ipv6_addr: str
    asnumber: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, hostname: _Optional[str] = ..., ipv4_addr: _Optional[str] = ..., ipv6_addr: _Optional[str] = ..., asnumber: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HostMetadataV4V6Remove(_message.Message):
    __slots__ = ("hostname", "ipv4_addr")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IPV4_ADDR_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ipv4_addr: str
    def __init__(self, hostname: _Optional[str] = ..., ipv4_addr: _Optional[str] = ...) -> None: ...

class IPAMPool(_message.Message):
    __slots__ = ("cidr", "masquerade", "ipip_mode", "vxlan_mode", "allowed_uses")
    CIDR_FIELD_NUMBER: _ClassVar[int]
    MASQUERADE_FIELD_NUMBER: _ClassVar[int]
    IPIP_MODE_FIELD_NUMBER: _ClassVar[int]
    VXLAN_MODE_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_USES_FIELD_NUMBER: _ClassVar[int]
    cidr: str
    masquerade: bool
    ipip_mode: str
    vxlan_mode: str
    allowed_uses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cidr: _Optional[str] = ..., masquerade: _Optional[bool] = ..., ipip_mode: _Optional[str] = ..., vxlan_mode: _Optional[str] = ..., allowed_uses: _Optional[_Iterable[str]] = ...) -> None: ...

class IPAMPoolUpdate(_message.Message):
    __slots__ = ("id", "pool")
    ID_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    id: str
    pool: IPAMPool
    def __init__(self, id: _Optional[str] = ..., pool: _Optional[_Union[IPAMPool, _Mapping]] = ...) -> None: ...

class IPAMPoolRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class Encapsulation(_message.Message):
    __slots__ = ("ipip_enabled", "vxlan_enabled", "vxlan_enabled_v6", "no_encap_enabled")
    IPIP_ENABLED_FIELD_NUMBER: _ClassVar[int]
    VXLAN_ENABLED_FIELD_NUMBER: _ClassVar[int]
    VXLAN_ENABLED_V6_FIELD_NUMBER: _ClassVar[int]
    NO_ENCAP_ENABLED_FIELD_NUMBER: _ClassVar[int]
    ipip_enabled: bool
    vxlan_enabled: bool
    vxlan_enabled_v6: bool
    no_encap_enabled: bool
    def __init__(self, ipip_enabled: _Optional[bool] = ..., vxlan_enabled: _Optional[bool] = ..., vxlan_enabled_v6: _Optional[bool] = ..., no_encap_enabled: _Optional[bool] = ...) -> None: ...

class ServiceAccountID(_message.Message):
    __slots__ = ("namespace", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ServiceAccountUpdate(_message.Message):
    __slots__ = ("id", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    id: ServiceAccountID
    labels: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[_Union[ServiceAccountID, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ServiceAccountRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: ServiceAccountID
    def __init__(self, id: _Optional[_Union[ServiceAccountID, _Mapping]] = ...) -> None: ...

class NamespaceID(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NamespaceUpdate(_message.Message):
    __slots__ = ("id", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    id: NamespaceID
    labels: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[_Union[NamespaceID, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class NamespaceRemove(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: NamespaceID
    def __init__(self, id: _Optional[_Union[NamespaceID, _Mapping]] = ...) -> None: ...

class TunnelType(_message.Message):
    __slots__ = ("ipip", "vxlan", "wireguard")
    IPIP_FIELD_NUMBER: _ClassVar[int]
    VXLAN_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_FIELD_NUMBER: _ClassVar[int]
    ipip: bool
    vxlan: bool
    wireguard: bool
    def __init__(self, ipip: _Optional[bool] = ..., vxlan: _Optional[bool] = ..., wireguard: _Optional[bool] = ...) -> None: ...

class RouteUpdate(_message.Message):
    __slots__ = ("ip_pool_type", "dst", "dst_node_name", "dst_node_ip", "same_subnet", "nat_outgoing", "local_workload", "tunnel_type", "borrowed", "types", "priority")
    IP_POOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    DST_NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    DST_NODE_IP_FIELD_NUMBER: _ClassVar[int]
    SAME_SUBNET_FIELD_NUMBER: _ClassVar[int]
    NAT_OUTGOING_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    TUNNEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    BORROWED_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ip_pool_type: IPPoolType
    dst: str
    dst_node_name: str
    dst_node_ip: str
    same_subnet: bool
    nat_outgoing: bool
    local_workload: bool
    tunnel_type: TunnelType
    borrowed: bool
    types: RouteType
    priority: RoutePriority
    def __init__(self, ip_pool_type: _Optional[_Union[IPPoolType, str]] = ..., dst: _Optional[str] = ..., dst_node_name: _Optional[str] = ..., dst_node_ip: _Optional[str] = ..., same_subnet: _Optional[bool] = ..., nat_outgoing: _Optional[bool] = ..., local_workload: _Optional[bool] = ..., tunnel_type: _Optional[_Union[TunnelType, _Mapping]] = ..., borrowed: _Optional[bool] = ..., types: _Optional[_Union[RouteType, str]] = ..., priority: _Optional[_Union[RoutePriority, str]] = ...) -> None: ...

class RouteRemove(_message.Message):
    __slots__ = ("dst",)
    DST_FIELD_NUMBER: _ClassVar[int]
    dst: str
    def __init__(self, dst: _Optional[str] = ...) -> None: ...

class VXLANTunnelEndpointUpdate(_message.Message):
    __slots__ = ("node", "mac", "ipv4_addr", "parent_device_ip", "mac_v6", "ipv6_addr", "parent_device_ipv6")
    NODE_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    IPV4_ADDR_FIELD_NUMBER: _ClassVar[int]
    PARENT_DEVICE_IP_FIELD_NUMBER: _ClassVar[int]
    MAC_V6_FIELD_NUMBER: _ClassVar[int]
    IPV6_ADDR_FIELD_NUMBER: _ClassVar[int]
    PARENT_DEVICE_IPV6_FIELD_NUMBER: _ClassVar[int]
    node: str
    mac: str
    ipv4_addr: str
    parent_device_ip: str
    mac_v6: str
    ipv6_addr: str
    parent_device_ipv6: str
    def __init__(self, node: _Optional[str] = ..., mac: _Optional[str] = ..., ipv4_addr: _Optional[str] = ..., parent_device_ip: _Optional[str] = ..., mac_v6: _Optional[str] = ..., ipv6_addr: _Optional[str] = ..., parent_device_ipv6: _Optional[str] = ...) -> None: ...

class VXLANTunnelEndpointRemove(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: str
    def __init__(self, node: _Optional[str] = ...) -> None: ...

class WireguardEndpointUpdate(_message.Message):
    __slots__ = ("hostname", "public_key", "interface_ipv4_addr")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    INTERFACE_IPV4_ADDR_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    public_key: str
    interface_ipv4_addr: str
    def __init__(self, hostname: _Optional[str] = ..., public_key: _Optional[str] = ..., interface_ipv4_addr: _Optional[str] = ...) -> None: ...

class WireguardEndpointRemove(_message.Message):
    __slots__ = ("hostname",)
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    def __init__(self, hostname: _Optional[str] = ...) -> None: ...

class WireguardEndpointV6Update(_message.Message):
    __slots__ = ("hostname", "public_key_v6", "interface_ipv6_addr")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_V6_FIELD_NUMBER: _ClassVar[int]
    INTERFACE_IPV6_ADDR_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    public_key_v6: str
    interface_ipv6_addr: str
    def __init__(self, hostname: _Optional[str] = ..., public_key_v6: _Optional[str] = ..., interface_ipv6_addr: _Optional[str] = ...) -> None: ...

class WireguardEndpointV6Remove(_message.Message):
    __slots__ = ("hostname",)
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    def __init__(self, hostname: _Optional[str] = ...) -> None: ...

class GlobalBGPConfigUpdate(_message.Message):
    __slots__ = ("service_cluster_cidrs", "service_external_cidrs", "service_loadbalancer_cidrs", "local_workload_peering_ip_v4", "local_workload_peering_ip_v6")
    SERVICE_CLUSTER_CIDRS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_EXTERNAL_CIDRS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_LOADBALANCER_CIDRS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORKLOAD_PEERING_IP_V4_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORKLOAD_PEERING_IP_V6_FIELD_NUMBER: _ClassVar[int]
    service_cluster_cidrs: _containers.RepeatedScalarFieldContainer[str]
    service_external_cidrs: _containers.RepeatedScalarFieldContainer[str]
    service_loadbalancer_cidrs: _containers.RepeatedScalarFieldContainer[str]
    local_workload_peering_ip_v4: str
    local_workload_peering_ip_v6: str
    def __init__(self, service_cluster_cidrs: _Optional[_Iterable[str]] = ..., service_external_cidrs: _Optional[_Iterable[str]] = ..., service_loadbalancer_cidrs: _Optional[_Iterable[str]] = ..., local_workload_peering_ip_v4: _Optional[str] = ..., local_workload_peering_ip_v6: _Optional[str] = ...) -> None: ...

class ServicePort(_message.Message):
    __slots__ = ("Protocol", "Port", "NodePort", "name")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    NODEPORT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    Protocol: str
    Port: int
    NodePort: int
    name: str
    def __init__(self, Protocol: _Optional[str] = ..., Port: _Optional[int] = ..., NodePort: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class ServiceUpdate(_message.Message):
    __slots__ = ("name", "namespace", "type", "cluster_ips", "loadbalancer_ip", "external_ips", "ports", "loadbalancer_ingress_ips", "session_affinity", "session_affinity_timeout_seconds", "external_traffic_policy", "internal_traffic_policy", "load_balancer_source_ranges", "health_check_node_port")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_IPS_FIELD_NUMBER: _ClassVar[int]
    LOADBALANCER_IP_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_IPS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    LOADBALANCER_INGRESS_IPS_FIELD_NUMBER: _ClassVar[int]
    SESSION_AFFINITY_FIELD_NUMBER: _ClassVar[int]
    SESSION_AFFINITY_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_SOURCE_RANGES_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_NODE_PORT_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    type: str
    cluster_ips: _containers.RepeatedScalarFieldContainer[str]
    loadbalancer_ip: str
    external_ips: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedCompositeFieldContainer[ServicePort]
    loadbalancer_ingress_ips: _containers.RepeatedScalarFieldContainer[str]
    session_affinity: str
    session_affinity_timeout_seconds: int
    external_traffic_policy: str
    internal_traffic_policy: str
    load_balancer_source_ranges: _containers.RepeatedScalarFieldContainer[str]
    health_check_node_port: int
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ..., type: _Optional[str] = ..., cluster_ips: _Optional[_Iterable[str]] = ..., loadbalancer_ip: _Optional[str] = ..., external_ips: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[_Union[ServicePort, _Mapping]]] = ..., loadbalancer_ingress_ips: _Optional[_Iterable[str]] = ..., session_affinity: _Optional[str] = ..., session_affinity_timeout_seconds: _Optional[int] = ..., external_traffic_policy: _Optional[str] = ..., internal_traffic_policy: _Optional[str] = ..., load_balancer_source_ranges: _Optional[_Iterable[str]] = ..., health_check_node_port: _Optional[int] = ...) -> None: ...

class ServiceRemove(_message.Message):
    __slots__ = ("name", "namespace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class ServiceBackendPort(_message.Message):
    __slots__ = ("name", "protocol", "port")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    name: str
    protocol: str
    port: int
    def __init__(self, name: _Optional[str] = ..., protocol: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class ServiceBackend(_message.Message):
    __slots__ = ("addresses", "ports", "local", "state", "node_name", "zone")
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    addresses: _containers.RepeatedScalarFieldContainer[str]
    ports: _containers.RepeatedCompositeFieldContainer[ServiceBackendPort]
    local: bool
    state: BackendState
    node_name: str
    zone: str
    def __init__(self, addresses: _Optional[_Iterable[str]] = ..., ports: _Optional[_Iterable[_Union[ServiceBackendPort, _Mapping]]] = ..., local: _Optional[bool] = ..., state: _Optional[_Union[BackendState, str]] = ..., node_name: _Optional[str] = ..., zone: _Optional[str] = ...) -> None: ...

class ServiceBackendsUpdate(_message.Message):
    __slots__ = ("name", "namespace", "backends")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    backends: _containers.RepeatedCompositeFieldContainer[ServiceBackend]
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ..., backends: _Optional[_Iterable[_Union[ServiceBackend, _Mapping]]] = ...) -> None: ...

class Statistic(_message.Message):
    __slots__ = ("direction", "relativity", "kind", "action", "value")
    class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        IN: _ClassVar[Statistic.Direction]
        OUT: _ClassVar[Statistic.Direction]
    IN: Statistic.Direction
    OUT: Statistic.Direction
    class Relativity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ABSOLUTE: _ClassVar[Statistic.Relativity]
        DELTA: _ClassVar[Statistic.Relativity]
    ABSOLUTE: Statistic.Relativity
    DELTA: Statistic.Relativity
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PACKETS: _ClassVar[Statistic.Kind]
        BYTES: _ClassVar[Statistic.Kind]
    PACKETS: Statistic.Kind
    BYTES: Statistic.Kind
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    RELATIVITY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    direction: Statistic.Direction
    relativity: Statistic.Relativity
    kind: Statistic.Kind
    action: Action
    value: int
    def __init__(self, direction: _Optional[_Union[Statistic.Direction, str]] = ..., relativity: _Optional[_Union[Statistic.Relativity, str]] = ..., kind: _Optional[_Union[Statistic.Kind, str]] = ..., action: _Optional[_Union[Action, str]] = ..., value: _Optional[int] = ...) -> None: ...

class RuleTrace(_message.Message):
    __slots__ = ("policy", "profile", "none", "direction", "rule_num")
    class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        INBOUND: _ClassVar[RuleTrace.Direction]
        OUTBOUND: _ClassVar[RuleTrace.Direction]
    INBOUND: RuleTrace.Direction
    OUTBOUND: RuleTrace.Direction
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    NONE_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    RULE_NUM_FIELD_NUMBER: _ClassVar[int]
    policy: PolicyID
    profile: ProfileID
    none: bool
    direction: RuleTrace.Direction
    rule_num: int
    def __init__(self, policy: _Optional[_Union[PolicyID, _Mapping]] = ..., profile: _Optional[_Union[ProfileID, _Mapping]] = ..., none: _Optional[bool] = ..., direction: _Optional[_Union[RuleTrace.Direction, str]] = ..., rule_num: _Optional[int] = ...) -> None: ...

class DataplaneStats(_message.Message):
    __slots__ = ("src_ip", "dst_ip", "src_port", "dst_port", "protocol", "stats", "rules", "action")
    SRC_IP_FIELD_NUMBER: _ClassVar[int]
    DST_IP_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    src_ip: str
    dst_ip: str
    src_port: int
    dst_port: int
    protocol: Protocol
    stats: _containers.RepeatedCompositeFieldContainer[Statistic]
    rules: _containers.RepeatedCompositeFieldContainer[RuleTrace]
    action: Action
    def __init__(self, src_ip: _Optional[str] = ..., dst_ip: _Optional[str] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ..., protocol: _Optional[_Union[Protocol, _Mapping]] = ..., stats: _Optional[_Iterable[_Union[Statistic, _Mapping]]] = ..., rules: _Optional[_Iterable[_Union[RuleTrace, _Mapping]]] = ..., action: _Optional[_Union[Action, str]] = ...) -> None: ...

class ReportResult(_message.Message):
    __slots__ = ("successful",)
    SUCCESSFUL_FIELD_NUMBER: _ClassVar[int]
    successful: bool
    def __init__(self, successful: _Optional[bool] = ...) -> None: ...
