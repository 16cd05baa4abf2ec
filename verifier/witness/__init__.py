"""A transparency-log witness (C2SP tlog-witness): ``core`` decides, ``store`` remembers, ``http`` serves."""
