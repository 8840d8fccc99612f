//! A task's Slurm request and batch script. The request comes from the
//! plugin's memory estimate (the same one the local arbiter admits on):
//!
//! * a CUDA task asks for `--gres=gpu:N` (or, on a cluster that splits GPUs
//!   into shards, `--gres=shard:K` with K shards covering the estimate) and
//!   `--mem` for its host-side memory (libtorch and CUDA's runtime, the
//!   datasets);
//! * a CPU task asks for `--mem` covering the estimate plus the runtime.
//!
//! Every task gets `--cpus-per-task`, a job name and output file naming the
//! task and dispatch, `--signal=B:USR1@N` (the worker checkpoints when Slurm
//! signals the batch shell, which is the worker itself), and `--time` when the
//! job set a time limit. The host's extra options come last, so they win.

use super::SlurmConfig;
use tli_plugin_api::Device;
use tli_runtime::orchestrator::TaskId;

const MIB: u64 = 1 << 20;
/// What a worker process needs besides its tensors on the CPU: libtorch,
/// the plugin, the gRPC client (measured RSS of an idle `tli worker` with a
/// plugin loaded is about 300 MiB; rounded up).
pub const WORKER_RUNTIME_BYTES: u64 = 512 * MIB;
/// Host memory of a CUDA worker besides its datasets: libtorch's CUDA
/// runtime and kernels take 1–2 GiB of host memory.
pub const CUDA_WORKER_HOST_BYTES: u64 = 2048 * MIB;

/// How CUDA tasks ask for GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuRequest {
    /// Whole GPUs: `--gres=gpu:N`.
    Whole,
    /// GPU shards (Slurm's `shard` GRES): each GPU is `per_gpu` shards of
    /// `gpu_bytes / per_gpu`; a task asks for as many as cover its estimate.
    Shards { per_gpu: u32, gpu_bytes: u64 },
}

/// One task attempt to submit.
#[derive(Clone, Debug)]
pub struct TaskRequest {
    pub task: TaskId,
    /// The dispatch id (the worker's lease).
    pub dispatch: i64,
    pub device: Device,
    /// The device-memory estimate with the arbiter's margin.
    pub estimate_bytes: u64,
    /// Bytes of the task's datasets (host memory on any device).
    pub data_bytes: u64,
    /// GPUs per task (CUDA tasks).
    pub gpus: u32,
    /// `--time` in minutes.
    pub time_limit_minutes: Option<u64>,
}

fn mib_ceil(bytes: u64) -> u64 {
    bytes.div_ceil(MIB).max(1)
}

/// The `sbatch` options for one task (without `--parsable`).
pub fn sbatch_args(config: &SlurmConfig, req: &TaskRequest) -> Vec<String> {
    let mut args = vec![
        format!("--job-name=tli-task-{}", req.task),
        format!(
            "--output={}",
            config
                .output_dir()
                .join(format!("task-{}-dispatch-{}.out", req.task, req.dispatch))
                .display()
        ),
        format!("--cpus-per-task={}", config.cpus_per_task.max(1)),
        format!("--signal=B:USR1@{}", config.signal_seconds),
    ];
    if let Some(p) = &config.partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(a) = &config.account {
        args.push(format!("--account={a}"));
    }
    let host_bytes = if req.device.is_cuda() {
        match &config.gpus {
            GpuRequest::Whole => args.push(format!("--gres=gpu:{}", req.gpus.max(1))),
            GpuRequest::Shards { per_gpu, gpu_bytes } => {
                let shard = (gpu_bytes / u64::from((*per_gpu).max(1))).max(1);
                let shards = req.estimate_bytes.div_ceil(shard).max(1);
                args.push(format!("--gres=shard:{shards}"));
            }
        }
        CUDA_WORKER_HOST_BYTES + 2 * req.data_bytes
    } else {
        req.estimate_bytes + WORKER_RUNTIME_BYTES + 2 * req.data_bytes
    };
    args.push(format!("--mem={}M", mib_ceil(host_bytes)));
    if let Some(minutes) = req.time_limit_minutes {
        args.push(format!("--time={minutes}"));
    }
    args.extend(config.extra_args.iter().cloned());
    args
}

/// Quotes `text` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The batch script: the batch shell becomes `tli worker` (`exec`), so
/// Slurm's signals (`scancel`, the time-limit warning) reach the worker.
pub fn batch_script(config: &SlurmConfig, req: &TaskRequest) -> String {
    format!(
        "#!/bin/sh\n# tli task {task}, dispatch {dispatch} (written by the tli host)\nexec {bin} worker \
         --host-url {url} --task {task} --dispatch {dispatch} --token-file {token} \
         --plugin-dir {plugins} --threads {threads}\n",
        task = req.task,
        dispatch = req.dispatch,
        bin = shell_quote(&config.worker_binary.display().to_string()),
        url = shell_quote(&config.worker_url),
        token = shell_quote(&config.token_file().display().to_string()),
        plugins = shell_quote(&config.worker_plugin_dir.display().to_string()),
        threads = config.cpus_per_task.max(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SlurmConfig {
        SlurmConfig {
            partition: Some("gpu".into()),
            account: None,
            extra_args: vec!["--qos=high".into()],
            shared_dir: "/shared/tli".into(),
            worker_url: "http://head:50051".into(),
            worker_binary: "/opt/tli's/bin/tli".into(),
            worker_plugin_dir: "/opt/tli/plugins".into(),
            commands_dir: None,
            gpus: GpuRequest::Whole,
            cpus_per_task: 4,
            max_jobs: 100,
            signal_seconds: 120,
            attach_timeout: std::time::Duration::from_secs(120),
        }
    }

    fn request(device: Device) -> TaskRequest {
        TaskRequest {
            task: 7,
            dispatch: 3,
            device,
            estimate_bytes: 3 * 1024 * MIB,
            data_bytes: 10 * MIB,
            gpus: 1,
            time_limit_minutes: Some(90),
        }
    }

    #[test]
    fn a_cuda_task_asks_for_gpus_and_host_memory() {
        let args = sbatch_args(&config(), &request(Device::Cuda(0)));
        for want in [
            "--gres=gpu:1",
            "--mem=2068M",
            "--cpus-per-task=4",
            "--time=90",
            "--signal=B:USR1@120",
            "--partition=gpu",
            "--job-name=tli-task-7",
            "--output=/shared/tli/slurm/task-7-dispatch-3.out",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        assert_eq!(args.last().map(String::as_str), Some("--qos=high"));
    }

    #[test]
    fn shards_cover_the_estimate() {
        let mut c = config();
        c.gpus = GpuRequest::Shards {
            per_gpu: 8,
            gpu_bytes: 80 * 1024 * MIB,
        };
        // 3 GiB of a 10 GiB shard: one shard; 25 GiB: three.
        let args = sbatch_args(&c, &request(Device::Cuda(0)));
        assert!(args.contains(&"--gres=shard:1".to_string()), "{args:?}");
        let mut big = request(Device::Cuda(0));
        big.estimate_bytes = 25 * 1024 * MIB;
        assert!(sbatch_args(&c, &big).contains(&"--gres=shard:3".to_string()));
    }

    #[test]
    fn a_cpu_task_asks_for_its_estimate_in_memory() {
        let args = sbatch_args(&config(), &request(Device::Cpu));
        assert!(!args.iter().any(|a| a.starts_with("--gres")), "{args:?}");
        // 3072 MiB estimate + 512 MiB runtime + 2 × 10 MiB data.
        assert!(args.contains(&"--mem=3604M".to_string()), "{args:?}");
    }

    #[test]
    fn the_script_execs_the_worker_with_quoted_paths() {
        let script = batch_script(&config(), &request(Device::Cpu));
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(
            script.contains("exec '/opt/tli'\\''s/bin/tli' worker"),
            "{script}"
        );
        assert!(script.contains("--task 7 --dispatch 3"), "{script}");
        assert!(script.contains("--token-file '/shared/tli/worker-token'"));
    }
}
