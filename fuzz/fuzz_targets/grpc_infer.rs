#![no_main]
//! `gateway::fuzzing::grpc_infer`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("grpc_infer", data, gateway::fuzzing::grpc_infer);
});
