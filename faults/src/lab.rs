//! The network the cluster under test runs on: one Linux network namespace
//! per process, each with its own address on a private bridge, so that a
//! partition or a one-way drop is an iptables rule inside the namespace of
//! the process it isolates, and real packets are lost.
//!
//! Layout (prefix `qf<pid>`, subnet `10.213.<n>.0/24`):
//! - a hub namespace holding the bridge;
//! - one namespace per node, its veth on the bridge, address `.10 + i`;
//! - a veth from the harness's own namespace to the bridge, address `.1`:
//!   the harness's clients reach every node as any client would.
//!
//! The bridge lives in its own namespace because the Docker engine sets the
//! host's FORWARD policy to DROP, which bridged packets would meet there.
//!
//! Everything is removed when the [`Lab`] is dropped; namespaces left by a
//! harness that was killed are removed by the next one ([`Lab::create`]).

use std::net::Ipv4Addr;
use std::process::Command;

/// Why the network could not be set up or changed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("`{cmd}` failed: {why}")]
    Command { cmd: String, why: String },
}

/// Runs `ip`/`iptables` and fails with its stderr.
fn run(program: &str, args: &[&str]) -> Result<(), LabError> {
    let cmd = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| LabError::Command { cmd: cmd.clone(), why: e.to_string() })?;
    if !out.status.success() {
        return Err(LabError::Command { cmd, why: String::from_utf8_lossy(&out.stderr).trim().to_string() });
    }
    Ok(())
}

/// The namespaces and links of one run.
pub struct Lab {
    prefix: String,
    net: [u8; 3],
    nodes: usize,
}

/// The harness pid in a namespace name of this module's (`qf<pid>…`).
fn harness_pid(name: &str) -> Option<u32> {
    let digits: String = name.strip_prefix("qf")?.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Whether namespace `name` belongs to a harness process that is gone.
fn orphaned(name: &str) -> bool {
    harness_pid(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

impl Lab {
    /// Creates the hub and `nodes` node namespaces. Needs root (CAP_NET_ADMIN).
    pub fn create(nodes: usize) -> Result<Lab, LabError> {
        assert!(nodes <= 200, "a /24 holds at most 200 nodes from .10");
        Self::remove_orphans();
        let pid = std::process::id();
        let lab = Lab { prefix: format!("qf{pid}"), net: [10, 213, (pid % 250) as u8], nodes };
        lab.build()?;
        Ok(lab)
    }

    /// Every namespace on this machine.
    fn namespaces() -> Vec<String> {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return Vec::new() };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// Kills whatever still runs in namespace `ns` (SIGKILL), then removes it.
    fn kill_and_delete(ns: &str) {
        if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        let _ = run("ip", &["netns", "del", ns]);
    }

    /// Removes the run with `prefix`: its processes, namespaces and links.
    /// Safe to call from a signal handler's thread while the run is live.
    pub fn teardown(prefix: &str) {
        for ns in Self::namespaces() {
            let Some(rest) = ns.strip_prefix(prefix) else { continue };
            let node = rest.strip_prefix('n').is_some_and(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()));
            if node || rest == "hub" {
                Self::kill_and_delete(&ns);
            }
        }
        let _ = run("ip", &["link", "del", &format!("{prefix}r")]);
    }

    /// The names' prefix of this run (`qf<pid>`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Removes the namespaces, processes and links of harnesses that were
    /// killed (SIGKILL leaves no chance to clean up).
    fn remove_orphans() {
        let prefixes: std::collections::BTreeSet<String> = Self::namespaces()
            .into_iter()
            .filter(|n| orphaned(n))
            .filter_map(|n| harness_pid(&n).map(|pid| format!("qf{pid}")))
            .collect();
        for p in prefixes {
            Self::teardown(&p);
        }
    }

    fn hub(&self) -> String {
        format!("{}hub", self.prefix)
    }

    /// Node `i`'s namespace.
    pub fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// Node `i`'s address.
    pub fn ip(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.net;
        Ipv4Addr::new(a, b, c, 10 + i as u8)
    }

    /// The harness's own address (its clients connect from here).
    pub fn harness_ip(&self) -> Ipv4Addr {
        let [a, b, c] = self.net;
        Ipv4Addr::new(a, b, c, 1)
    }

    fn build(&self) -> Result<(), LabError> {
        let hub = self.hub();
        run("ip", &["netns", "add", &hub])?;
        run("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &hub, "link", "set", "br0", "up"])?;
        // The harness's leg: root side keeps `<prefix>r`, hub side is enslaved.
        let root = format!("{}r", self.prefix);
        let root_peer = format!("{}rh", self.prefix);
        run("ip", &["link", "add", &root, "type", "veth", "peer", "name", &root_peer])?;
        run("ip", &["link", "set", &root_peer, "netns", &hub])?;
        run("ip", &["-n", &hub, "link", "set", &root_peer, "master", "br0", "up"])?;
        run("ip", &["addr", "add", &format!("{}/24", self.harness_ip()), "dev", &root])?;
        run("ip", &["link", "set", &root, "up"])?;
        for i in 0..self.nodes {
            let ns = self.ns(i);
            let leg = format!("{}h{i}", self.prefix);
            let inner = format!("{}i{i}", self.prefix);
            run("ip", &["netns", "add", &ns])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            run("ip", &["link", "add", &leg, "type", "veth", "peer", "name", &inner])?;
            run("ip", &["link", "set", &leg, "netns", &hub])?;
            run("ip", &["-n", &hub, "link", "set", &leg, "master", "br0", "up"])?;
            run("ip", &["link", "set", &inner, "netns", &ns])?;
            run("ip", &["-n", &ns, "addr", "add", &format!("{}/24", self.ip(i)), "dev", &inner])?;
            run("ip", &["-n", &ns, "link", "set", &inner, "up"])?;
        }
        Ok(())
    }

    /// `ip netns exec <ns>`: the program and arguments that run `program`
    /// inside node `i`'s namespace (the process keeps its pid: ip execs it).
    pub fn exec_prefix(&self, i: usize) -> Vec<String> {
        vec!["netns".into(), "exec".into(), self.ns(i)]
    }

    fn iptables(&self, i: usize, args: &[&str]) -> Result<(), LabError> {
        let ns = self.ns(i);
        let mut full = vec!["netns", "exec", &ns, "iptables", "-w"];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Node `i` stops receiving from `from` (its INPUT drops them).
    pub fn drop_from(&self, i: usize, from: Ipv4Addr) -> Result<(), LabError> {
        self.iptables(i, &["-A", "INPUT", "-s", &from.to_string(), "-j", "DROP"])
    }

    /// Node `i` stops sending to `to` (its OUTPUT drops them).
    pub fn drop_to(&self, i: usize, to: Ipv4Addr) -> Result<(), LabError> {
        self.iptables(i, &["-A", "OUTPUT", "-d", &to.to_string(), "-j", "DROP"])
    }

    /// Removes every rule on every node: the network is whole again.
    pub fn heal(&self) -> Result<(), LabError> {
        for i in 0..self.nodes {
            self.iptables(i, &["-F", "INPUT"])?;
            self.iptables(i, &["-F", "OUTPUT"])?;
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        Self::teardown(&self.prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_namespaces_of_dead_harnesses_are_orphans() {
        assert!(!orphaned(&format!("qf{}hub", std::process::id())));
        assert!(!orphaned("qfxhub"));
        assert!(!orphaned("docker-ns"));
        // Pids wrap far below this.
        assert!(orphaned("qf4194999n3"));
    }
}
