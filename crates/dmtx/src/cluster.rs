//! The cluster file: a versioned membership view of memory and compute nodes.
//!
//! ```toml
//! format = "dmtx-cluster"
//! version = 1            # file format
//! cluster_id = 7         # every connection names it; nodes of another cluster are refused
//! epoch = 1              # membership epoch: bumped whenever members change
//! token_file = "token"   # shared secret, relative to this file; must not be readable by others
//! replicas = 2           # copies of every table (1 primary + backups)
//! op_deadline = "10s"    # optional: a post unanswered this long fails (node lost)
//! connect_timeout = "5s" # optional: TCP connect + handshake
//! keepalive = "1s"       # optional: PING a silent connection with posts in flight ("off": never)
//!
//! [[memory_nodes]]
//! id = 0
//! address = "10.0.0.1:7400"
//! bytes = "4GiB"
//!
//! [[memory_nodes]]
//! id = 1
//! address = "10.0.0.2:7400"
//! bytes = "4GiB"
//!
//! [[compute_nodes]]
//! id = 0
//! address = "10.0.0.10:7500"
//!
//! [[placement]]          # optional: the primary of a table (FORD §6.2.3's case study)
//! table = "savings"
//! primary = 0
//! ```
//!
//! The file is one membership view (epoch + members); a membership service can later
//! hand out the same [`ClusterView`] without changing its users. Every error names the
//! field and what to write instead.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::parse_region_bytes;

/// Name in the `format` field.
pub const CLUSTER_FORMAT: &str = "dmtx-cluster";
/// File format version this build reads.
pub const CLUSTER_FORMAT_VERSION: u32 = 1;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    format: String,
    version: u32,
    cluster_id: u64,
    epoch: u64,
    token_file: Option<String>,
    #[serde(default = "default_replicas")]
    replicas: u16,
    #[serde(default)]
    memory_nodes: Vec<RawMemoryNode>,
    #[serde(default)]
    compute_nodes: Vec<RawComputeNode>,
    #[serde(default)]
    placement: Vec<RawPlacement>,
    op_deadline: Option<String>,
    connect_timeout: Option<String>,
    keepalive: Option<String>,
}

fn default_replicas() -> u16 {
    2
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemoryNode {
    id: u16,
    address: String,
    bytes: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawComputeNode {
    id: u16,
    address: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlacement {
    table: String,
    primary: u16,
}

/// A memory node of the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryNodeSpec {
    /// Dense id, `0..memory_nodes`.
    pub id: u16,
    /// Where it listens.
    pub address: SocketAddr,
    /// Its region size.
    pub bytes: u64,
}

/// A compute node of the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeNodeSpec {
    /// Dense id.
    pub id: u16,
    /// Where it listens for CN-to-CN messages.
    pub address: SocketAddr,
}

/// One validated membership view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// Cluster id.
    pub cluster_id: u64,
    /// Membership epoch.
    pub epoch: u64,
    /// The token file, resolved against the cluster file's directory.
    pub token_file: Option<PathBuf>,
    /// Copies of every table.
    pub replicas: u16,
    /// Memory nodes, by id.
    pub memory_nodes: Vec<MemoryNodeSpec>,
    /// Compute nodes, by id.
    pub compute_nodes: Vec<ComputeNodeSpec>,
    /// Table name → memory node holding its primary.
    pub placement: Vec<(String, u16)>,
    /// Time limits of the `tcp` transport.
    pub timeouts: Timeouts,
    /// The compute node this process runs (`dmtx bench --cn`), one of `compute_nodes`;
    /// `None` when it runs the only compute node of the run.
    pub cn: Option<u16>,
}

/// How long compute nodes wait for memory nodes (defaults: those of `TcpConfig::new`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// A post unanswered this long fails with `Unreachable`.
    pub op_deadline: Duration,
    /// TCP connect plus handshake.
    pub connect_timeout: Duration,
    /// PING interval on a silent connection with posts in flight; `None` never pings.
    pub keepalive: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        let d = dmtx_net::TcpConfig::new(0, b"");
        Self {
            op_deadline: d.op_deadline,
            connect_timeout: d.connect_timeout,
            keepalive: d.keepalive,
        }
    }
}

impl Timeouts {
    /// Apply to a transport configuration.
    pub fn apply(&self, c: &mut dmtx_net::TcpConfig) {
        c.op_deadline = self.op_deadline;
        c.connect_timeout = self.connect_timeout;
        c.keepalive = self.keepalive;
    }
}

/// A duration written as an integer with a unit: `250ms`, `10s`, `2m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("\"{text}\": expected a whole number with a unit, e.g. \"500ms\" or \"10s\""))?;
    let d = match unit.trim() {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" | "min" => Duration::from_secs(n.saturating_mul(60)),
        u => return Err(format!("\"{text}\": unknown unit `{u}`; use ms, s or m")),
    };
    if d.is_zero() {
        return Err(format!("\"{text}\": must be more than zero"));
    }
    Ok(d)
}

/// A cluster file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {what}")]
pub struct ClusterError {
    /// The file.
    pub path: String,
    /// The field at fault and the fix.
    pub what: String,
}

impl ClusterView {
    /// The TCP settings every connection of this cluster uses: its id, epoch, token
    /// (read from the token file) and timeouts.
    pub fn tcp_config(&self) -> Result<dmtx_net::TcpConfig, ClusterError> {
        let token = match &self.token_file {
            Some(path) => read_token(path)?,
            None => Vec::new(),
        };
        let mut tcp = dmtx_net::TcpConfig::new(self.cluster_id, &token);
        tcp.epoch = self.epoch;
        self.timeouts.apply(&mut tcp);
        Ok(tcp)
    }

    /// Read and validate a cluster file.
    pub fn load(path: &Path) -> Result<Self, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|e| ClusterError {
            path: path.display().to_string(),
            what: e.to_string(),
        })?;
        Self::parse(&text, path)
    }

    /// Validate the text of a cluster file at `path` (used for messages and to resolve
    /// the token file).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ClusterError> {
        let err = |what: String| ClusterError {
            path: path.display().to_string(),
            what,
        };
        let raw: RawCluster = toml::from_str(text).map_err(|e| err(one_line(&e.to_string())))?;
        if raw.format != CLUSTER_FORMAT {
            return Err(err(format!(
                "`format` = \"{}\": expected \"{CLUSTER_FORMAT}\"",
                raw.format
            )));
        }
        if raw.version != CLUSTER_FORMAT_VERSION {
            return Err(err(format!(
                "`version` = {}: this dmtx reads cluster files of version {CLUSTER_FORMAT_VERSION}",
                raw.version
            )));
        }
        if raw.memory_nodes.is_empty() {
            return Err(err(
                "no `[[memory_nodes]]`: list at least one, with `id`, `address` and `bytes`".into(),
            ));
        }
        let mut memory_nodes = Vec::with_capacity(raw.memory_nodes.len());
        for (i, m) in raw.memory_nodes.iter().enumerate() {
            let address = m.address.parse().map_err(|_| {
                err(format!(
                    "`memory_nodes[{i}].address` = \"{}\": expected host:port with an IP address, e.g. \"10.0.0.1:7400\"",
                    m.address
                ))
            })?;
            let bytes = parse_region_bytes(&m.bytes).map_err(|why| {
                err(format!(
                    "`bytes` = \"{}\" of memory node {} (`memory_nodes[{i}]`): {why}",
                    m.bytes, m.id
                ))
            })?;
            memory_nodes.push(MemoryNodeSpec {
                id: m.id,
                address,
                bytes,
            });
        }
        memory_nodes.sort_by_key(|m| m.id);
        for (i, m) in memory_nodes.iter().enumerate() {
            if m.id as usize != i {
                return Err(err(format!(
                    "memory node ids must be 0..{} without gaps or repeats; found id {} where {i} was expected",
                    memory_nodes.len(),
                    m.id
                )));
            }
        }
        let mut compute_nodes = Vec::with_capacity(raw.compute_nodes.len());
        for (i, c) in raw.compute_nodes.iter().enumerate() {
            let address = c.address.parse().map_err(|_| {
                err(format!(
                    "`compute_nodes[{i}].address` = \"{}\": expected host:port with an IP address",
                    c.address
                ))
            })?;
            compute_nodes.push(ComputeNodeSpec { id: c.id, address });
        }
        let ids: BTreeSet<u16> = compute_nodes.iter().map(|c| c.id).collect();
        if ids.len() != compute_nodes.len() {
            return Err(err("`compute_nodes`: two entries have the same `id`".into()));
        }
        if raw.replicas == 0 || raw.replicas as usize > memory_nodes.len() {
            return Err(err(format!(
                "`replicas` = {}: must be between 1 and the number of memory nodes ({})",
                raw.replicas,
                memory_nodes.len()
            )));
        }
        let mut placement = Vec::with_capacity(raw.placement.len());
        for (i, p) in raw.placement.iter().enumerate() {
            if p.primary as usize >= memory_nodes.len() {
                return Err(err(format!(
                    "`placement[{i}].primary` = {} for table `{}`: no memory node has that id",
                    p.primary, p.table
                )));
            }
            placement.push((p.table.clone(), p.primary));
        }
        let mut timeouts = Timeouts::default();
        let field = |name: &str, v: &Option<String>| -> Result<Option<Duration>, ClusterError> {
            v.as_deref()
                .map(|v| parse_duration(v).map_err(|e| err(format!("`{name}` = {e}"))))
                .transpose()
        };
        if let Some(d) = field("op_deadline", &raw.op_deadline)? {
            timeouts.op_deadline = d;
        }
        if let Some(d) = field("connect_timeout", &raw.connect_timeout)? {
            timeouts.connect_timeout = d;
        }
        match raw.keepalive.as_deref() {
            Some("off") => timeouts.keepalive = None,
            Some(_) => timeouts.keepalive = field("keepalive", &raw.keepalive)?,
            None => {}
        }
        let token_file = raw.token_file.map(|t| match path.parent() {
            Some(dir) if Path::new(&t).is_relative() => dir.join(t),
            _ => PathBuf::from(t),
        });
        Ok(Self {
            cluster_id: raw.cluster_id,
            epoch: raw.epoch,
            token_file,
            replicas: raw.replicas,
            memory_nodes,
            compute_nodes,
            placement,
            timeouts,
            cn: None,
        })
    }

    /// Run as compute node `id` (`--cn`): it must be listed under `[[compute_nodes]]` of
    /// the file at `path`.
    pub fn select_cn(&mut self, id: u16, path: &Path) -> Result<(), ClusterError> {
        if !self.compute_nodes.iter().any(|c| c.id == id) {
            let listed: Vec<String> = self.compute_nodes.iter().map(|c| c.id.to_string()).collect();
            return Err(ClusterError {
                path: path.display().to_string(),
                what: format!(
                    "--cn {id}: no `[[compute_nodes]]` entry has that id (listed: {}); add one with its `id` and `address`",
                    if listed.is_empty() { "none".to_string() } else { listed.join(", ") }
                ),
            });
        }
        self.cn = Some(id);
        Ok(())
    }

    /// The memory node holding the primary of `table`, if the file places it.
    pub fn primary_of(&self, table: &str) -> Option<u16> {
        self.placement.iter().find(|(t, _)| t == table).map(|&(_, mn)| mn)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Read a token file, refusing one that users other than its owner can read (the token
/// never goes on a command line, where `ps` shows it).
pub fn read_token(path: &Path) -> Result<Vec<u8>, ClusterError> {
    let err = |what: String| ClusterError {
        path: path.display().to_string(),
        what,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(err(format!(
                "the token file has mode {:o} and others can read it; run `chmod 600 {}`",
                mode & 0o777,
                path.display()
            )));
        }
    }
    let token = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let token = token.trim_ascii().to_vec();
    if token.len() < 16 {
        return Err(err(format!(
            "the token is {} bytes; use at least 16 random bytes (e.g. `head -c 32 /dev/urandom | base64`)",
            token.len()
        )));
    }
    Ok(token)
}

/// A directory this process created for its own use (`dmtx cluster up` without `--dir`:
/// the token and the cluster file). It is removed when dropped, and also when the process
/// ends through `std::process::exit` (a second Ctrl-C during a run), which runs no
/// destructors.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

/// Scratch directories alive now, removed by [`remove_scratch_dirs_at_exit`].
static SCRATCH_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

extern "C" fn remove_scratch_dirs_at_exit() {
    // Another thread may hold the lock while `exit` runs; leaving the directories then is
    // better than a deadlock at exit.
    if let Ok(dirs) = SCRATCH_DIRS.try_lock() {
        for d in dirs.iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl ScratchDir {
    /// Create `path` (and its parents) as a scratch directory.
    pub fn create(path: &Path) -> Result<Self, ClusterError> {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        std::fs::create_dir_all(path).map_err(|e| ClusterError {
            path: path.display().to_string(),
            what: format!("cannot create the cluster directory: {e}; pass a writable `--dir`"),
        })?;
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain function with no arguments; it touches only a
            // static behind a lock it never waits for.
            unsafe {
                libc::atexit(remove_scratch_dirs_at_exit);
            }
        });
        SCRATCH_DIRS.lock().unwrap().push(path.to_path_buf());
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        SCRATCH_DIRS.lock().unwrap().retain(|d| d != &self.path);
    }
}

/// Memory-node processes started on loopback by `dmtx cluster up --local N`; killed
/// when dropped.
pub struct LocalNodes {
    children: Vec<std::process::Child>,
    /// The directory holding the token and the cluster file.
    pub dir: PathBuf,
    /// The cluster file describing the nodes.
    pub cluster_file: PathBuf,
}

impl LocalNodes {
    /// Start `n` memory nodes of `bytes` each (running `exe memnode ...`) on
    /// `127.0.0.1` with free ports, a fresh 0600 token and a cluster file in `dir`.
    pub fn start(exe: &Path, n: u16, bytes: u64, replicas: u16, dir: &Path) -> Result<Self, ClusterError> {
        use std::io::{BufRead, Read};
        let err = |what: String| ClusterError {
            path: dir.display().to_string(),
            what,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
        let token_path = dir.join("token");
        let mut raw = [0u8; 24];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut raw))
            .map_err(|e| err(format!("reading /dev/urandom for a token: {e}")))?;
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&token_path)
                .map_err(|e| err(e.to_string()))?;
            writeln!(f, "{token}").map_err(|e| err(e.to_string()))?;
        }
        // TOML integers are i64.
        let cluster_id = u64::from_le_bytes(raw[..8].try_into().unwrap()) & i64::MAX as u64;
        let mut nodes = Self {
            children: Vec::new(),
            dir: dir.to_path_buf(),
            cluster_file: dir.join("cluster.toml"),
        };
        let mut toml = format!(
            "format = \"{CLUSTER_FORMAT}\"\nversion = {CLUSTER_FORMAT_VERSION}\ncluster_id = {cluster_id}\nepoch = 0\ntoken_file = \"token\"\nreplicas = {replicas}\n"
        );
        for id in 0..n {
            let mut child = std::process::Command::new(exe)
                .args(["memnode", "--listen", "127.0.0.1:0", "--size", &bytes.to_string()])
                .args([
                    "--node-id",
                    &id.to_string(),
                    "--cluster-id",
                    &cluster_id.to_string(),
                    "--token-file",
                ])
                .arg(&token_path)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| err(format!("starting memory node {id}: {e}")))?;
            let mut line = String::new();
            let stdout = child.stdout.take().expect("piped");
            let mut stderr = child.stderr.take().expect("piped");
            nodes.children.push(child);
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map_err(|e| err(format!("memory node {id}: {e}")))?;
            // "memnode ID listening on ADDR (...)"
            let Some(addr) = line.split_whitespace().nth(4) else {
                // It exited: its one-line error (on its stderr) is the cause, reported
                // once here rather than as a second `error:` line.
                let mut why = String::new();
                let _ = stderr.read_to_string(&mut why);
                let why = why
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("error: "))
                    .map_or_else(|| format!("it printed `{}`", line.trim()), str::to_string);
                return Err(err(format!("memory node {id} did not start: {why}")));
            };
            // Later messages of a running node (warnings, errors) reach our stderr.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut stderr, &mut std::io::stderr());
            });
            toml += &format!("\n[[memory_nodes]]\nid = {id}\naddress = \"{addr}\"\nbytes = \"{bytes}\"\n");
        }
        std::fs::write(&nodes.cluster_file, toml).map_err(|e| err(e.to_string()))?;
        Ok(nodes)
    }
}

impl LocalNodes {
    /// List `n` compute nodes (ids `0..n`) on `127.0.0.1` in the cluster file, each on a
    /// port free now (bound and released here: another process could take it before the
    /// compute node binds it, which it then reports).
    pub fn add_compute_nodes(&self, n: u16) -> Result<(), ClusterError> {
        use std::io::Write;
        let err = |what: String| ClusterError {
            path: self.cluster_file.display().to_string(),
            what,
        };
        // Held together so that the ports differ.
        let listeners: Vec<std::net::TcpListener> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()
            .map_err(|e| err(format!("finding free loopback ports for compute nodes: {e}")))?;
        let mut text = String::new();
        for (id, l) in listeners.iter().enumerate() {
            let addr = l.local_addr().map_err(|e| err(e.to_string()))?;
            text += &format!("\n[[compute_nodes]]\nid = {id}\naddress = \"{addr}\"\n");
        }
        drop(listeners);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&self.cluster_file)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| err(e.to_string()))
    }

    /// CPU time (user + system) each memory-node process has used so far, from
    /// `/proc/PID/stat`; `None` where it cannot be read (not Linux, process gone).
    pub fn cpu_seconds(&self) -> Vec<Option<f64>> {
        self.children.iter().map(|c| process_cpu_seconds(c.id())).collect()
    }
}

/// Wait for every child (the compute-node processes of `cluster up --compute-nodes`);
/// once one fails (a non-zero exit), the others are killed: they would otherwise wait at
/// the start barrier for it until their time limit. Each child's exit code (`None`
/// when a signal ended it: the ones killed here).
pub fn wait_all_or_stop(children: &mut [std::process::Child]) -> std::io::Result<Vec<Option<i32>>> {
    let mut codes: Vec<Option<Option<i32>>> = vec![None; children.len()];
    let mut failed = false;
    while codes.iter().any(Option::is_none) {
        for (c, code) in children.iter_mut().zip(codes.iter_mut()) {
            if code.is_none() {
                if let Some(status) = c.try_wait()? {
                    failed |= status.code() != Some(0);
                    *code = Some(status.code());
                }
            }
        }
        if failed {
            for (c, code) in children.iter_mut().zip(codes.iter_mut()) {
                if code.is_none() {
                    let _ = c.kill();
                    *code = Some(c.wait()?.code());
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(codes.into_iter().map(|c| c.expect("every child waited for")).collect())
}

/// User + system CPU seconds of process `pid` (Linux `/proc`).
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th
    // fields of the whole line, i.e. the 12th and 13th after ") ".
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| (utime + stime) as f64 / hz as f64)
}

impl Drop for LocalNodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            // SIGTERM first for a graceful stop, then make sure.
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        for c in &mut self.children {
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_come_from_the_file_with_clear_errors() {
        let p = Path::new("/x/cluster.toml");
        let v = ClusterView::parse(GOOD, p).unwrap();
        assert_eq!(v.timeouts, Timeouts::default());
        let with = GOOD.replace(
            "replicas = 2\n",
            "replicas = 2\nop_deadline = \"1500ms\"\nconnect_timeout = \"2s\"\nkeepalive = \"off\"\n",
        );
        let t = ClusterView::parse(&with, p).unwrap().timeouts;
        assert_eq!(t.op_deadline, Duration::from_millis(1500));
        assert_eq!(t.connect_timeout, Duration::from_secs(2));
        assert_eq!(t.keepalive, None);
        for (bad, want) in [
            ("op_deadline = \"10\"", "unknown unit"),
            ("op_deadline = \"0s\"", "more than zero"),
            ("keepalive = \"soon\"", "`keepalive`"),
        ] {
            let e =
                ClusterView::parse(&GOOD.replace("replicas = 2\n", &format!("replicas = 2\n{bad}\n")), p).unwrap_err();
            assert!(e.what.contains(want), "{bad}: {e}");
        }
    }

    /// Goal: a scratch directory is removed when dropped, and also when the process ends
    /// through `std::process::exit` (the second Ctrl-C of `dmtx bench`), which runs no
    /// destructors. Method: this test runs itself again as a child that makes one and
    /// exits; the parent checks that the directory is gone.
    #[test]
    fn scratch_dirs_are_removed_on_drop_and_on_exit() {
        const CHILD: &str = "DMTX_TEST_SCRATCH_DIR";
        if let Some(path) = std::env::var_os(CHILD) {
            let dir = ScratchDir::create(Path::new(&path)).unwrap();
            std::fs::write(dir.path().join("token"), "secret").unwrap();
            std::process::exit(3);
        }
        let base = std::env::temp_dir().join(format!("dmtx-scratch-{}", std::process::id()));
        let dropped = base.join("dropped");
        {
            let d = ScratchDir::create(&dropped).unwrap();
            std::fs::write(d.path().join("token"), "secret").unwrap();
        }
        assert!(!dropped.exists());
        let exited = base.join("exited");
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cluster::tests::scratch_dirs_are_removed_on_drop_and_on_exit",
            ])
            .env(CHILD, &exited)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(3), "the child made its directory and exited");
        assert!(base.exists() && !exited.exists(), "{} left behind", exited.display());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_failed_child_stops_the_others() {
        let spawn = |script: &str| std::process::Command::new("sh").args(["-c", script]).spawn().unwrap();
        let started = std::time::Instant::now();
        let mut children = vec![spawn("sleep 30"), spawn("sleep 0.1; exit 2"), spawn("sleep 30")];
        let codes = wait_all_or_stop(&mut children).unwrap();
        assert_eq!(codes, vec![None, Some(2), None]);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        let mut ok = vec![spawn("exit 0"), spawn("sleep 0.2")];
        assert_eq!(wait_all_or_stop(&mut ok).unwrap(), vec![Some(0), Some(0)]);
    }

    #[test]
    fn cpu_time_of_a_busy_process_is_read() {
        let me = std::process::id();
        let before = process_cpu_seconds(me).expect("readable on Linux");
        // Spin until the reading has grown by 0.1 s, rather than for a fixed wall time: on
        // a loaded host (several builds at once) 300 ms of wall time got 90 ms of CPU.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after - before < 0.1 && t.elapsed() < std::time::Duration::from_secs(30) {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            after = process_cpu_seconds(me).unwrap();
        }
        std::hint::black_box(x);
        assert!(after - before >= 0.1, "{before} -> {after}");
        assert_eq!(process_cpu_seconds(u32::MAX), None);
    }

    const GOOD: &str = r#"
format = "dmtx-cluster"
version = 1
cluster_id = 7
epoch = 3
token_file = "token"
replicas = 2

[[memory_nodes]]
id = 1
address = "127.0.0.1:7401"
bytes = "64MiB"

[[memory_nodes]]
id = 0
address = "127.0.0.1:7400"
bytes = "1GiB"

[[compute_nodes]]
id = 0
address = "127.0.0.1:7500"

[[placement]]
table = "savings"
primary = 1
"#;

    fn parse(text: &str) -> Result<ClusterView, ClusterError> {
        ClusterView::parse(text, Path::new("/etc/dmtx/cluster.toml"))
    }

    #[test]
    fn a_good_file_is_one_membership_view() {
        let v = parse(GOOD).unwrap();
        assert_eq!((v.cluster_id, v.epoch, v.replicas), (7, 3, 2));
        assert_eq!(v.memory_nodes[0].address, "127.0.0.1:7400".parse().unwrap());
        assert_eq!(v.memory_nodes[1].bytes, 64 << 20);
        assert_eq!(v.token_file.as_deref(), Some(Path::new("/etc/dmtx/token")));
        assert_eq!(v.primary_of("savings"), Some(1));
        assert_eq!(v.primary_of("checking"), None);
    }

    #[test]
    fn errors_name_the_field_and_the_fix() {
        for (edit, needle) in [
            (("format = \"dmtx-cluster\"", "format = \"other\""), "`format`"),
            (("version = 1", "version = 2"), "`version` = 2"),
            (
                ("address = \"127.0.0.1:7401\"", "address = \"nohost\""),
                "`memory_nodes[0].address`",
            ),
            (
                ("bytes = \"64MiB\"", "bytes = \"lots\""),
                "`bytes` = \"lots\" of memory node 1 (`memory_nodes[0]`): is not a size",
            ),
            (("replicas = 2", "replicas = 3"), "`replicas` = 3"),
            (("primary = 1", "primary = 5"), "`placement[0].primary` = 5"),
            (("id = 1\n", "id = 4\n"), "without gaps"),
            (("epoch = 3", "epoch = 3\ncolour = 1"), "colour"),
        ] {
            let text = GOOD.replacen(edit.0, edit.1, 1);
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
            assert!(e.starts_with("/etc/dmtx/cluster.toml: "), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn token_files_readable_by_others_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("dmtx-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("token");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token(&p).unwrap_err().to_string().contains("chmod 600"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(&p).unwrap(), b"0123456789abcdef0123");
        std::fs::write(&p, "short").unwrap();
        assert!(read_token(&p).unwrap_err().to_string().contains("at least 16"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
