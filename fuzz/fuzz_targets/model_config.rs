#![no_main]
//! `gateway::fuzzing::model_config`, under the counting allocator's memory bound.

libfuzzer_sys::fuzz_target!(init: tandem_fuzz::init(), |data: &[u8]| {
    tandem_fuzz::check("model_config", data, gateway::fuzzing::model_config);
});
