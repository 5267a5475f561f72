def pytest_configure(config):
    config.addinivalue_line("markers", "compat: runs a suite in a second virtualenv on the oldest supported Airflow")
