use super::*;

#[test]
fn the_embedded_default_parses_and_serves_the_example() {
    let c = Config::from_toml(DEFAULT_CONFIG, "default", Path::new(".")).unwrap();
    c.validate().unwrap();
    assert_eq!(c.listen, SocketAddr::from(([127, 0, 0, 1], 8000)));
    assert!(c.model_repository.unwrap().ends_with("config/models"));
}

#[test]
fn overrides_layer_on_defaults() {
    let text = r#"
        model_repository = "repo"
        [defaults]
        max_batch_size = 32
        [models.a]
        max_queue_delay_us = 5
    "#;
    let c = Config::from_toml(text, "t", Path::new("/etc/tandem")).unwrap();
    assert_eq!(
        c.model_repository.as_deref(),
        Some(Path::new("/etc/tandem/repo"))
    );
    let s = c.settings_for("a", None, None);
    assert_eq!((s.max_batch_size, s.max_queue_delay_us), (32, 5));
    let repo = ModelOverrides {
        max_batch_size: Some(8),
        ..Default::default()
    };
    assert_eq!(c.settings_for("a", Some(&repo), None).max_batch_size, 8);
    let admin = ModelOverrides {
        max_batch_size: Some(4),
        ..Default::default()
    };
    assert_eq!(
        c.settings_for("a", Some(&repo), Some(&admin))
            .max_batch_size,
        4
    );
    assert_eq!(c.settings_for("b", None, None).max_queue_delay_us, 1000);
}

#[test]
fn unknown_keys_and_bad_values_are_errors() {
    let err = Config::from_toml("lisen = \"x\"", "t", Path::new(".")).unwrap_err();
    assert!(err.to_string().contains("lisen"), "{err}");
    let c = Config::from_toml(
        "model_repository = \"r\"\n[defaults]\nmax_batch_size = 0",
        "t",
        Path::new("."),
    )
    .unwrap();
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("max_batch_size")
    );
    let c = Config::from_toml(
        "model_repository = \"r\"\n[defaults]\nmax_batch_tokens = 0",
        "t",
        Path::new("."),
    )
    .unwrap();
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("max_batch_tokens")
    );
    assert!(Config::default().validate().is_err());
}

#[test]
fn the_duty_cycle_cap_is_a_share_of_time() {
    let with = |v: &str| {
        Config::from_toml(
            &format!("model_repository = \"r\"\n[coloc]\nmax_duty_cycle = {v}"),
            "t",
            Path::new("."),
        )
        .unwrap()
    };
    let set = with("0.5");
    set.validate().unwrap();
    assert_eq!(set.coloc.duty_cycle_cap(true), 0.5);
    assert_eq!(set.coloc.duty_cycle_cap(false), 0.5);
    let unset = ColocConfig::default();
    assert_eq!(unset.duty_cycle_cap(true), CPU_MAX_DUTY_CYCLE);
    assert_eq!(unset.duty_cycle_cap(false), 1.0);
    for bad in ["0.0", "1.5", "-1.0"] {
        let err = with(bad).validate().unwrap_err().to_string();
        assert!(err.contains("max_duty_cycle"), "{bad}: {err}");
    }
}

#[test]
fn cpu_precision_is_f32_unless_a_model_asks_for_bf16() {
    let text = r#"
        model_repository = "r"
        [models.fast]
        cpu_precision = "bf16"
        [models.close]
        cpu_precision = "bf16x3"
    "#;
    let c = Config::from_toml(text, "t", Path::new(".")).unwrap();
    assert_eq!(
        c.settings_for("fast", None, None).cpu_precision,
        CpuPrecision::Bf16
    );
    let close = c.settings_for("close", None, None).cpu_precision;
    assert_eq!(close, CpuPrecision::Bf16x3);
    assert_eq!(close.to_string(), "bf16x3");
    assert_eq!(
        c.settings_for("other", None, None).cpu_precision,
        CpuPrecision::F32
    );
    let repo = ModelOverrides {
        cpu_precision: Some(CpuPrecision::F32),
        ..Default::default()
    };
    let s = c.settings_for("fast", Some(&repo), None);
    assert_eq!(s.cpu_precision, CpuPrecision::F32);
    let err = Config::from_toml("[defaults]\ncpu_precision = \"fp8\"", "t", Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(err.contains("fp8") && err.contains("bf16x3"), "{err}");
}
