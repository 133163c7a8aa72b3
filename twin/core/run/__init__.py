"""Running the step model: the driver, its memos, the batch path (see twin.core.run.driver)."""
