//! `uuidmap cluster partitions`: a partitioned cluster's map in etcd, shown
//! and made (README "Partitions").

use uuidmap_client::partition::{
    ClusterView, EtcdMap, GroupName, MapCache, PartitionError, PartitionId, PartitionTable,
};
use uuidmap_client::{ClientOptions, MoveOptions, PartitionedClient};

use crate::cli_common::{CliError, EXIT_OK};

/// Where the map is (every `cluster partitions` command).
#[derive(clap::Args, Clone, Debug)]
pub struct EtcdArgs {
    /// etcd's client URLs, separated by commas.
    #[arg(long, env = "UUIDMAP_ETCD", default_value = "http://127.0.0.1:2379")]
    pub etcd: String,
    /// The partitioned cluster's name (its keys are under /uuidmap/NAME/).
    #[arg(long, env = "UUIDMAP_ETCD_CLUSTER", default_value = "uuidmap")]
    pub etcd_cluster: String,
}

impl EtcdArgs {
    /// `--etcd` as a list.
    fn endpoints(&self) -> Vec<String> {
        self.etcd
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    async fn map(&self) -> Result<EtcdMap, CliError> {
        EtcdMap::connect(&self.endpoints(), &self.etcd_cluster)
            .await
            .map_err(refused)
    }
}

/// `uuidmap cluster partitions ...`.
#[derive(clap::Args, Clone, Debug)]
pub struct PartitionsArgs {
    /// What to do (without one: show the map).
    #[command(subcommand)]
    pub command: Option<PartitionsCommand>,
    /// Where the map is.
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// The subcommands of `cluster partitions`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum PartitionsCommand {
    /// Make the cluster's partition table: the 4096 partitions split
    /// between the groups in equal runs. Refused if it has one.
    Init {
        /// The groups, separated by commas (their servers' --group).
        #[arg(long, required = true, value_delimiter = ',')]
        groups: Vec<String>,
    },
}

/// `uuidmap cluster move`.
#[derive(clap::Args, Clone, Debug)]
pub struct MoveArgs {
    /// The partition (0 to 4095).
    #[arg(long)]
    pub partition: u16,
    /// The group it moves to.
    #[arg(long)]
    pub to: String,
    /// Operations per write batch sent to the target group (at most its
    /// servers' --max-write-ops).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Seconds the groups' members may take to fence a new table.
    #[arg(long, default_value = "10", value_parser = crate::cli_common::seconds)]
    pub fence_timeout: std::time::Duration,
    /// Where the map is.
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Bearer token for the groups' servers (prefer the environment
    /// variable: a flag shows in `ps`).
    #[arg(long, env = "UUIDMAP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM of the CA that signed the servers' certificates (https only).
    #[arg(long, env = "UUIDMAP_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
}

/// Moves a partition; prints what it did.
pub async fn execute_move(args: MoveArgs) -> Result<i32, CliError> {
    let p = PartitionId::new(args.partition).ok_or_else(|| {
        CliError::Refused(format!(
            "--partition {} does not exist: partitions are 0 to 4095",
            args.partition
        ))
    })?;
    let to = args.to.parse::<GroupName>().map_err(refused)?;
    let mut connect = ClientOptions::new("");
    connect.token = args.token.clone();
    connect.tls_ca = args.tls_ca.clone();
    let client = PartitionedClient::connect(
        &args.etcd.endpoints(),
        &args.etcd.etcd_cluster,
        connect.builder(),
    )
    .await?;
    let options = MoveOptions {
        batch: args.batch,
        fence_timeout: args.fence_timeout,
        ..MoveOptions::default()
    };
    let r = client.move_partition(p, &to, &options).await?;
    println!("partition {}", r.partition);
    println!("from {}", r.from);
    println!("to {}", r.to);
    println!("copied {}", r.copied);
    println!("caught_up {}", r.caught_up);
    println!("reconciled {}", r.reconciled);
    println!("writes_blocked_ms {:.1}", r.blocked.as_secs_f64() * 1e3);
    println!("total_ms {:.1}", r.total.as_secs_f64() * 1e3);
    println!("table_version {}", r.version);
    Ok(EXIT_OK)
}

/// A partitioned server's `Stats` fields, as `uuidmap stats` prints them.
pub fn stats_fields(p: &uuidmap::server::proto::v1::PartitionStats) -> Vec<(&'static str, String)> {
    vec![
        ("partition_group", p.group.clone()),
        ("partition_cluster", p.cluster.clone()),
        ("partition_table_version", p.table_version.to_string()),
        ("partition_fenced_version", p.fenced_version.to_string()),
        ("partition_fence_lsn", p.fence_lsn.to_string()),
        ("partitions_owned", p.owned.to_string()),
        ("partitions_moving_out", p.moving_out.to_string()),
        ("partitions_moving_in", p.moving_in.to_string()),
        (
            "partition_etcd_error",
            if p.etcd_error.is_empty() {
                "none".into()
            } else {
                p.etcd_error.clone()
            },
        ),
    ]
}

fn refused(e: PartitionError) -> CliError {
    CliError::Refused(e.to_string())
}

/// Runs `args`; the exit code.
pub async fn execute(args: PartitionsArgs) -> Result<i32, CliError> {
    let map = args.etcd.map().await?;
    match args.command {
        None => {
            let view = map.load().await.map_err(refused)?;
            let sizes = group_sizes(&view).await;
            print!("{}", show(&view, map.cluster(), &sizes));
        }
        Some(PartitionsCommand::Init { groups }) => {
            let groups = groups
                .iter()
                .map(|g| g.parse::<GroupName>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(refused)?;
            let table = PartitionTable::even(&groups).map_err(refused)?;
            let version = map.init(&table).await.map_err(refused)?;
            println!("table_version {version}");
            // What the servers now read.
            let cache = MapCache::start(map, true).await.map_err(refused)?;
            let view = cache.view();
            let sizes = group_sizes(&view).await;
            print!("{}", show(&view, cache.etcd().cluster(), &sizes));
        }
    }
    Ok(EXIT_OK)
}

/// Each group's entries, from the first of its members that answers
/// `Stats` within a second (absent: none did).
async fn group_sizes(view: &ClusterView) -> std::collections::BTreeMap<GroupName, u64> {
    let mut sizes = std::collections::BTreeMap::new();
    for group in view.groups.keys() {
        for url in view.member_urls(group) {
            let mut options = ClientOptions::new(url);
            options.timeout = std::time::Duration::from_secs(1);
            let Ok(client) = options.builder().build() else {
                continue;
            };
            if let Ok(s) = client.stats().await {
                sizes.insert(group.clone(), s.entries);
                break;
            }
        }
    }
    sizes
}

/// The map as the command prints it: `key value` lines, then the table's
/// runs.
fn show(
    view: &ClusterView,
    cluster: &str,
    sizes: &std::collections::BTreeMap<GroupName, u64>,
) -> String {
    let mut out = format!("cluster {cluster}\n");
    let Some(table) = &view.table else {
        out.push_str("table none (make one: uuidmap cluster partitions init --groups G1,G2,...)\n");
        return out;
    };
    out.push_str(&format!("table_version {}\n", view.version));
    for (group, partitions) in table.owners() {
        let members = view
            .groups
            .get(&group)
            .map(|m| {
                m.iter()
                    .map(|(name, url)| format!("{name}={url}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| "none registered".into());
        let entries = sizes
            .get(&group)
            .map_or("unknown".to_owned(), |n| n.to_string());
        out.push_str(&format!(
            "group {group} partitions {partitions} entries {entries} members {members}\n"
        ));
    }
    for (group, members) in &view.groups {
        if !table.owners().contains_key(group) {
            out.push_str(&format!(
                "group {group} partitions 0 members {}\n",
                members.len()
            ));
        }
    }
    let moves: Vec<String> = table
        .moves()
        .map(|(p, a)| {
            format!(
                "{p}:{}>{}",
                a.owner,
                a.moving_to.as_ref().map_or("", |t| t.as_str())
            )
        })
        .collect();
    out.push_str(&format!(
        "moving {}\n",
        if moves.is_empty() {
            "none".to_owned()
        } else {
            moves.join(" ")
        }
    ));
    out.push_str(&table.to_text());
    out
}
