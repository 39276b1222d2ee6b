//! A small blocking client for the Kubernetes CRI (`runtime.v1.RuntimeService`), as the kubelet
//! drives a container runtime: pod sandboxes, containers, their status and their log files.
//!
//! It speaks gRPC itself: unary calls over HTTP/2 (`h2`) on the runtime's unix socket, each
//! message a protobuf (`prost`) behind gRPC's 5-byte prefix, the status read from the trailers.
//! The messages are the subset of the CRI v1 API the tests use, with the API's field numbers
//! (fields left out are skipped by protobuf on both sides). No `protoc`, no generated code.
//!
//! Use: `Cri::connect(sock)`, then `run_pod_sandbox(&PodSpec)`, `create_container`,
//! `start_container`, `wait_exited`, `read_log`, and `stop_*`/`remove_*` to clean up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

/// What can go wrong talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("cannot connect to the CRI socket {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("HTTP/2 on the CRI socket: {0}")]
    H2(#[from] h2::Error),
    #[error("CRI {method}: gRPC status {code}: {message}")]
    Status {
        method: String,
        code: u32,
        message: String,
    },
    #[error("CRI {method}: malformed response: {why}")]
    Malformed { method: String, why: String },
    #[error("CRI {method}: no answer in {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    #[error("container {id} did not exit in {timeout:?} (state {state})")]
    NotExited {
        id: String,
        timeout: Duration,
        state: i32,
    },
    #[error("reading the container log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the container log {path} line {line} is not `<time> <stream> <P|F> <text>`")]
    LogFormat { path: PathBuf, line: usize },
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
}

/// The CRI v1 messages the tests send and read (field numbers from the API's `api.proto`).
pub mod api {
    use std::collections::HashMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct VersionRequest {
        #[prost(string, tag = "1")]
        pub version: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct VersionResponse {
        #[prost(string, tag = "1")]
        pub version: String,
        #[prost(string, tag = "2")]
        pub runtime_name: String,
        #[prost(string, tag = "3")]
        pub runtime_version: String,
        #[prost(string, tag = "4")]
        pub runtime_api_version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub uid: String,
        #[prost(string, tag = "3")]
        pub namespace: String,
        #[prost(uint32, tag = "4")]
        pub attempt: u32,
    }
    /// `NamespaceMode`: POD = 0, CONTAINER = 1, NODE = 2, TARGET = 3.
    pub const NAMESPACE_NODE: i32 = 2;
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamespaceOption {
        #[prost(int32, tag = "1")]
        pub network: i32,
        #[prost(int32, tag = "2")]
        pub pid: i32,
        #[prost(int32, tag = "3")]
        pub ipc: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxSandboxSecurityContext {
        #[prost(message, optional, tag = "1")]
        pub namespace_options: Option<NamespaceOption>,
        #[prost(bool, tag = "6")]
        pub privileged: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxPodSandboxConfig {
        #[prost(string, tag = "1")]
        pub cgroup_parent: String,
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxSandboxSecurityContext>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<PodSandboxMetadata>,
        #[prost(string, tag = "2")]
        pub hostname: String,
        #[prost(string, tag = "3")]
        pub log_directory: String,
        #[prost(map = "string, string", tag = "6")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "7")]
        pub annotations: HashMap<String, String>,
        #[prost(message, optional, tag = "8")]
        pub linux: Option<LinuxPodSandboxConfig>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxRequest {
        #[prost(message, optional, tag = "1")]
        pub config: Option<PodSandboxConfig>,
        #[prost(string, tag = "2")]
        pub runtime_handler: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxResponse {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }
    /// Stop and remove requests of a sandbox.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxIdRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Empty {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(uint32, tag = "2")]
        pub attempt: u32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageSpec {
        #[prost(string, tag = "1")]
        pub image: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mount {
        #[prost(string, tag = "1")]
        pub container_path: String,
        #[prost(string, tag = "2")]
        pub host_path: String,
        #[prost(bool, tag = "3")]
        pub readonly: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerSecurityContext {
        #[prost(bool, tag = "2")]
        pub privileged: bool,
        #[prost(message, optional, tag = "3")]
        pub namespace_options: Option<NamespaceOption>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerConfig {
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxContainerSecurityContext>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ContainerMetadata>,
        #[prost(message, optional, tag = "2")]
        pub image: Option<ImageSpec>,
        #[prost(string, repeated, tag = "3")]
        pub command: Vec<String>,
        #[prost(string, repeated, tag = "4")]
        pub args: Vec<String>,
        #[prost(message, repeated, tag = "6")]
        pub envs: Vec<KeyValue>,
        #[prost(message, repeated, tag = "7")]
        pub mounts: Vec<Mount>,
        #[prost(map = "string, string", tag = "9")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "10")]
        pub annotations: HashMap<String, String>,
        #[prost(string, tag = "11")]
        pub log_path: String,
        #[prost(message, optional, tag = "15")]
        pub linux: Option<LinuxContainerConfig>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
        #[prost(message, optional, tag = "2")]
        pub config: Option<ContainerConfig>,
        #[prost(message, optional, tag = "3")]
        pub sandbox_config: Option<PodSandboxConfig>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerResponse {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    /// Start and remove requests of a container.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerIdRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopContainerRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(int64, tag = "2")]
        pub timeout: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatusRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(bool, tag = "2")]
        pub verbose: bool,
    }
    /// `ContainerState`: CREATED = 0, RUNNING = 1, EXITED = 2, UNKNOWN = 3.
    pub const CONTAINER_EXITED: i32 = 2;
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatus {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(int32, tag = "3")]
        pub state: i32,
        #[prost(int32, tag = "7")]
        pub exit_code: i32,
        #[prost(string, tag = "10")]
        pub reason: String,
        #[prost(string, tag = "11")]
        pub message: String,
        #[prost(string, tag = "15")]
        pub log_path: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerStatusResponse {
        #[prost(message, optional, tag = "1")]
        pub status: Option<ContainerStatus>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Container {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(string, tag = "2")]
        pub pod_sandbox_id: String,
        #[prost(int32, tag = "6")]
        pub state: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListContainersResponse {
        #[prost(message, repeated, tag = "1")]
        pub containers: Vec<Container>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandbox {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(int32, tag = "3")]
        pub state: i32,
        #[prost(string, tag = "7")]
        pub runtime_handler: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxResponse {
        #[prost(message, repeated, tag = "1")]
        pub items: Vec<PodSandbox>,
    }
}

/// A pod as the kubelet describes it to the runtime.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    /// Pod name (also its hostname without host network), unique per test.
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The RuntimeClass handler (`nvidia`), empty for the runtime's default.
    pub handler: String,
    /// Where the runtime writes the containers' logs (`<dir>/<container log_path>`).
    pub log_dir: PathBuf,
    /// Host network, PID and IPC namespaces (no CNI needed for host network).
    pub host_network: bool,
    pub annotations: HashMap<String, String>,
}

/// A container of a pod.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    /// The image reference, as the runtime knows it.
    pub image: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Annotations, as a device plugin's Allocate response sets them.
    pub annotations: HashMap<String, String>,
    /// Bind mounts (host path, container path, read-only).
    pub mounts: Vec<(PathBuf, String, bool)>,
    pub privileged: bool,
}

impl ContainerSpec {
    /// The container's log file, relative to the pod's log directory.
    pub fn log_path(&self) -> String {
        format!("{}.log", self.name)
    }
}

/// How long a single call may take; creating a container unpacks the image.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// A connection to a CRI runtime service.
pub struct Cri {
    rt: tokio::runtime::Runtime,
    send: h2::client::SendRequest<Bytes>,
}

impl Cri {
    /// Connect to the runtime's socket (HTTP/2 without TLS, as gRPC over unix sockets is).
    pub fn connect(socket: &Path) -> Result<Cri, CriError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(CriError::Runtime)?;
        let send = rt.block_on(async {
            let io = tokio::net::UnixStream::connect(socket)
                .await
                .map_err(|source| CriError::Connect {
                    path: socket.to_path_buf(),
                    source,
                })?;
            let (send, conn) = h2::client::handshake(io).await?;
            // The connection is driven whenever a call blocks on this runtime.
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, CriError>(send)
        })?;
        Ok(Cri { rt, send })
    }

    /// One unary call: `runtime.v1.RuntimeService/<method>`.
    fn call<Q: Message, R: Message + Default>(&self, method: &str, req: &Q) -> Result<R, CriError> {
        let send = self.send.clone();
        let path = format!("/runtime.v1.RuntimeService/{method}");
        let fut = unary(send, path, req.encode_to_vec());
        let body = self
            .rt
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, fut).await })
            .map_err(|_| CriError::Timeout {
                method: method.to_string(),
                timeout: CALL_TIMEOUT,
            })?
            .map_err(|e| match e {
                UnaryError::H2(e) => CriError::H2(e),
                UnaryError::Status(code, message) => CriError::Status {
                    method: method.to_string(),
                    code,
                    message,
                },
                UnaryError::Malformed(why) => CriError::Malformed {
                    method: method.to_string(),
                    why,
                },
            })?;
        R::decode(body).map_err(|e| CriError::Malformed {
            method: method.to_string(),
            why: e.to_string(),
        })
    }

    /// `Version`: the runtime's name and CRI API version.
    pub fn version(&self) -> Result<api::VersionResponse, CriError> {
        self.call(
            "Version",
            &api::VersionRequest {
                version: "v1".into(),
            },
        )
    }

    fn sandbox_config(pod: &PodSpec) -> api::PodSandboxConfig {
        let ns = if pod.host_network {
            Some(api::NamespaceOption {
                network: api::NAMESPACE_NODE,
                pid: 0,
                ipc: 0,
            })
        } else {
            None
        };
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                attempt: 0,
            }),
            // A host-network pod keeps the node's UTS namespace, whose name runc cannot set.
            hostname: if pod.host_network {
                String::new()
            } else {
                pod.name.clone()
            },
            log_directory: pod.log_dir.to_string_lossy().into_owned(),
            labels: HashMap::new(),
            annotations: pod.annotations.clone(),
            linux: Some(api::LinuxPodSandboxConfig {
                cgroup_parent: String::new(),
                security_context: Some(api::LinuxSandboxSecurityContext {
                    namespace_options: ns,
                    privileged: false,
                }),
            }),
        }
    }

    /// `RunPodSandbox` with the pod's RuntimeClass handler: the sandbox id.
    pub fn run_pod_sandbox(&self, pod: &PodSpec) -> Result<String, CriError> {
        let r: api::RunPodSandboxResponse = self.call(
            "RunPodSandbox",
            &api::RunPodSandboxRequest {
                config: Some(Self::sandbox_config(pod)),
                runtime_handler: pod.handler.clone(),
            },
        )?;
        Ok(r.pod_sandbox_id)
    }

    /// `CreateContainer` in the sandbox `pod_id` made from `pod`: the container id.
    pub fn create_container(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        c: &ContainerSpec,
    ) -> Result<String, CriError> {
        let ns = pod.host_network.then_some(api::NamespaceOption {
            network: api::NAMESPACE_NODE,
            pid: 0,
            ipc: 0,
        });
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: c.name.clone(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: c.image.clone(),
            }),
            command: c.command.clone(),
            args: Vec::new(),
            envs: c
                .env
                .iter()
                .map(|(k, v)| api::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            mounts: c
                .mounts
                .iter()
                .map(|(host, ctr, ro)| api::Mount {
                    container_path: ctr.clone(),
                    host_path: host.to_string_lossy().into_owned(),
                    readonly: *ro,
                })
                .collect(),
            labels: HashMap::new(),
            annotations: c.annotations.clone(),
            log_path: c.log_path(),
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext {
                    privileged: c.privileged,
                    namespace_options: ns,
                }),
            }),
        };
        let r: api::CreateContainerResponse = self.call(
            "CreateContainer",
            &api::CreateContainerRequest {
                pod_sandbox_id: pod_id.to_string(),
                config: Some(config),
                sandbox_config: Some(Self::sandbox_config(pod)),
            },
        )?;
        Ok(r.container_id)
    }

    /// `StartContainer`.
    pub fn start_container(&self, id: &str) -> Result<(), CriError> {
        let _: api::Empty = self.call(
            "StartContainer",
            &api::ContainerIdRequest {
                container_id: id.to_string(),
            },
        )?;
        Ok(())
    }

    /// `ContainerStatus`.
    pub fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let r: api::ContainerStatusResponse = self.call(
            "ContainerStatus",
            &api::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            },
        )?;
        r.status.ok_or_else(|| CriError::Malformed {
            method: "ContainerStatus".into(),
            why: "no status".into(),
        })
    }

    /// Poll `ContainerStatus` until the container has exited: its final status.
    pub fn wait_exited(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<api::ContainerStatus, CriError> {
        let start = Instant::now();
        loop {
            let s = self.container_status(id)?;
            if s.state == api::CONTAINER_EXITED {
                return Ok(s);
            }
            if start.elapsed() > timeout {
                return Err(CriError::NotExited {
                    id: id.to_string(),
                    timeout,
                    state: s.state,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `StopContainer` with a grace period in seconds.
    pub fn stop_container(&self, id: &str, grace_s: i64) -> Result<(), CriError> {
        let _: api::Empty = self.call(
            "StopContainer",
            &api::StopContainerRequest {
                container_id: id.to_string(),
                timeout: grace_s,
            },
        )?;
        Ok(())
    }

    /// `RemoveContainer`.
    pub fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let _: api::Empty = self.call(
            "RemoveContainer",
            &api::ContainerIdRequest {
                container_id: id.to_string(),
            },
        )?;
        Ok(())
    }

    /// `StopPodSandbox`: stops its containers and the sandbox.
    pub fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let _: api::Empty = self.call(
            "StopPodSandbox",
            &api::PodSandboxIdRequest {
                pod_sandbox_id: id.to_string(),
            },
        )?;
        Ok(())
    }

    /// `RemovePodSandbox`: removes it and its containers.
    pub fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let _: api::Empty = self.call(
            "RemovePodSandbox",
            &api::PodSandboxIdRequest {
                pod_sandbox_id: id.to_string(),
            },
        )?;
        Ok(())
    }

    /// `ListContainers` without a filter.
    pub fn list_containers(&self) -> Result<Vec<api::Container>, CriError> {
        let r: api::ListContainersResponse = self.call("ListContainers", &api::Empty {})?;
        Ok(r.containers)
    }

    /// `ListPodSandbox` without a filter.
    pub fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>, CriError> {
        let r: api::ListPodSandboxResponse = self.call("ListPodSandbox", &api::Empty {})?;
        Ok(r.items)
    }

    /// Create and start `c` in the sandbox, wait for it to exit, and return its exit code and
    /// its log (stdout and stderr lines, in order); the container is removed afterwards.
    pub fn run_to_exit(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        c: &ContainerSpec,
        timeout: Duration,
    ) -> Result<(i32, Vec<LogLine>), CriError> {
        let id = self.create_container(pod_id, pod, c)?;
        let result = self.start_container(&id).and_then(|()| {
            let st = self.wait_exited(&id, timeout)?;
            Ok((st.exit_code, read_log(&pod.log_dir.join(c.log_path()))?))
        });
        let removed = self.remove_container(&id);
        let r = result?;
        removed?;
        Ok(r)
    }
}

enum UnaryError {
    H2(h2::Error),
    Status(u32, String),
    Malformed(String),
}

impl From<h2::Error> for UnaryError {
    fn from(e: h2::Error) -> Self {
        UnaryError::H2(e)
    }
}

/// A gRPC unary call: the request message framed (flag 0, big-endian length), the response
/// message unframed, the `grpc-status` checked in the trailers (or the headers of a
/// trailers-only answer).
async fn unary(
    send: h2::client::SendRequest<Bytes>,
    path: String,
    msg: Vec<u8>,
) -> Result<Bytes, UnaryError> {
    let mut send = send.ready().await?;
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| UnaryError::Malformed(e.to_string()))?;
    let (resp, mut stream) = send.send_request(req, false)?;
    let mut frame = BytesMut::with_capacity(5 + msg.len());
    frame.put_u8(0);
    frame.put_u32(msg.len() as u32);
    frame.put_slice(&msg);
    stream.send_data(frame.freeze(), true)?;
    let resp = resp.await?;
    let (parts, mut body) = resp.into_parts();
    if let Some(err) = grpc_error(&parts.headers) {
        return Err(err);
    }
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?.unwrap_or_default();
    if let Some(err) = grpc_error(&trailers) {
        return Err(err);
    }
    if !trailers.contains_key("grpc-status") {
        return Err(UnaryError::Malformed("no grpc-status".into()));
    }
    let mut data = data.freeze();
    if data.len() < 5 || data[0] != 0 {
        return Err(UnaryError::Malformed(format!(
            "a response frame of {} bytes",
            data.len()
        )));
    }
    data.advance(1);
    let len = data.get_u32() as usize;
    if data.len() != len {
        return Err(UnaryError::Malformed(format!(
            "message length {len}, {} bytes",
            data.len()
        )));
    }
    Ok(data)
}

/// A non-zero `grpc-status` with its (percent-encoded) message.
fn grpc_error(h: &http::HeaderMap) -> Option<UnaryError> {
    let code: u32 = h.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    if code == 0 {
        return None;
    }
    let raw = h
        .get("grpc-message")
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    Some(UnaryError::Status(code, percent_decode(&raw)))
}

fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of a CRI container log: `<RFC 3339 time> <stdout|stderr> <P|F> <text>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: String,
    /// `P`: the line continues in the next entry; `F`: the line ends here.
    pub partial: bool,
    pub text: String,
}

/// Parse a container's log file (the format the kubelet reads).
pub fn read_log(path: &Path) -> Result<Vec<LogLine>, CriError> {
    let text = std::fs::read_to_string(path).map_err(|source| CriError::Log {
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .enumerate()
        .map(|(n, l)| {
            let bad = || CriError::LogFormat {
                path: path.to_path_buf(),
                line: n + 1,
            };
            let mut parts = l.splitn(4, ' ');
            let (Some(_time), Some(stream), Some(tag), text) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            if !matches!(stream, "stdout" | "stderr") || !matches!(tag, "P" | "F") {
                return Err(bad());
            }
            Ok(LogLine {
                stream: stream.to_string(),
                partial: tag == "P",
                text: text.unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The text of one stream of a log, partial entries joined, one `\n` per full line.
pub fn stream_text(log: &[LogLine], stream: &str) -> String {
    let mut out = String::new();
    for l in log.iter().filter(|l| l.stream == stream) {
        out.push_str(&l.text);
        if !l.partial {
            out.push('\n');
        }
    }
    out
}
