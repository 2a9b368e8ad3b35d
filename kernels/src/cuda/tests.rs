//! The CUDA backend's own guarantees, on a device where one exists (each test says on
//! stderr that it is skipped otherwise): one stream per executor with no event tracking,
//! cuBLAS handles reused across executors and usable from any thread, memory given back
//! when buffers shrink, and SM partitions that run the same ops.

use std::sync::Arc;

use super::linear::{Activations, Executor};
use super::{CudaDevice, DeviceVec, StreamPriority, device_for_test};
use crate::{Activation, HostWeights};

/// `y = relu(x · Wᵀ + b)` for a 3 → 2 layer on `device`, from the thread it is called on.
fn small_layer(exec: &Executor) -> Vec<f32> {
    let w = [1.0f32, 2.0, 3.0, -1.0, -2.0, -3.0];
    let layer = exec
        .upload_linear(HostWeights::F32(&w), &[0.5, 0.5], 3, 2)
        .unwrap();
    let x: DeviceVec = exec.upload(&[1.0f32, 1.0, 1.0]).unwrap();
    let mut y = DeviceVec::default();
    exec.reserve(&mut y, 2).unwrap();
    exec.matmul(&layer, Activations::F32(&x), 1, &mut y)
        .unwrap();
    exec.bias_act(&layer, &mut y, 1, Activation::Relu).unwrap();
    let mut host = [0f32; 2];
    exec.read(&y, &mut host).unwrap();
    host.to_vec()
}

#[test]
fn executors_do_not_track_events_cuda() {
    let Some(device) = device_for_test("executors_do_not_track_events_cuda") else {
        return;
    };
    let a = Executor::new(device.clone(), StreamPriority::Serving).unwrap();
    let b = Executor::new(device.clone(), StreamPriority::Training).unwrap();
    // Two streams: cudarc would now record and wait on events around every use.
    assert!(!device.ctx.is_event_tracking());
    assert!(!device.ctx.is_managing_stream_synchronization());
    assert_eq!(small_layer(&a), [6.5, 0.0]);
    assert_eq!(small_layer(&b), [6.5, 0.0]);
}

#[test]
fn cublas_handles_are_reused_not_destroyed_cuda() {
    let Some(device) = device_for_test("cublas_handles_are_reused_not_destroyed_cuda") else {
        return;
    };
    let first = Executor::new(device.clone(), StreamPriority::Serving).unwrap();
    assert_eq!(device.idle_blas_handles(), 0);
    drop(first);
    assert_eq!(device.idle_blas_handles(), 1, "given back, not destroyed");
    // A hot swap: the new version's executor takes the handle the old one gave back.
    let second = Executor::new(device.clone(), StreamPriority::Serving).unwrap();
    assert_eq!(device.idle_blas_handles(), 0);
    assert_eq!(small_layer(&second), [6.5, 0.0]);
}

#[test]
fn an_executor_runs_products_on_a_fresh_thread_cuda() {
    let Some(device) = device_for_test("an_executor_runs_products_on_a_fresh_thread_cuda") else {
        return;
    };
    let exec = Executor::new(device, StreamPriority::Serving).unwrap();
    // The thread has no current context until the executor binds its own.
    let y = std::thread::spawn(move || small_layer(&exec))
        .join()
        .unwrap();
    assert_eq!(y, [6.5, 0.0]);
}

#[test]
fn shrinking_a_buffer_gives_its_memory_back_cuda() {
    let Some(device) = device_for_test("shrinking_a_buffer_gives_its_memory_back_cuda") else {
        return;
    };
    let exec = Executor::new(device.clone(), StreamPriority::Training).unwrap();
    const BIG: usize = 256 << 20; // values: 1 GiB
    let mut buf = DeviceVec::default();
    exec.resize(&mut buf, BIG).unwrap();
    exec.synchronize().unwrap();
    let holding = device.memory_info().unwrap().free_bytes;
    exec.resize(&mut buf, 1024).unwrap();
    exec.synchronize().unwrap();
    device.release_free_memory().unwrap();
    let after = device.memory_info().unwrap().free_bytes;
    assert_eq!(buf.capacity(), 1024);
    // Other tests allocate beside this one: most of the gibibyte, not all of it, is asked.
    let freed = after.saturating_sub(holding);
    eprintln!("MEASURED shrinking 1 GiB to 4 KiB freed {freed} bytes on the device");
    assert!(
        freed >= 3 * (BIG * 4) / 4,
        "freed {freed} of {} bytes",
        BIG * 4
    );
}

#[test]
fn an_sm_partition_runs_the_same_ops_cuda() {
    let Some(device) = device_for_test("an_sm_partition_runs_the_same_ops_cuda") else {
        return;
    };
    let part: Arc<CudaDevice> = device.sm_partition(0.25).unwrap();
    let (sms, of) = part.sm_share().unwrap();
    eprintln!("MEASURED an SM partition of a quarter: {}", part.describe());
    assert!(sms >= 1 && sms < of, "{sms} of {of}");
    // Its kernels and cuBLAS run on its own thread (a green context is current on one).
    let y = std::thread::spawn(move || {
        let exec = Executor::new(part, StreamPriority::Training).unwrap();
        small_layer(&exec)
    })
    .join()
    .unwrap();
    assert_eq!(y, [6.5, 0.0]);
}
